"""A queueing curve for loaded latency: latency as a function of achieved bandwidth.

Model (an M/M/1-style waiting time, generalised by an exponent):

    latency(u) = L0 + a * ((1 - u / u_max) ** -b - 1),      0 <= u < u_max

* ``L0``    the unloaded latency (the curve's value at u = 0);
* ``a``     the scale of the queueing term (same unit as the latency);
* ``u_max`` the load at which latency diverges (the saturation bandwidth, same unit as u:
  a fraction of peak bandwidth, or bytes/s);
* ``b``     the steepness; b = 1 is the M/M/1 form ``a * rho / (1 - rho)`` with
  ``rho = u / u_max``.

Fitting: for fixed (u_max, b) the model is linear in (L0, a), solved in closed form by least
squares (with a >= 0); u_max (and b, when fitted) are found by a coarse-to-fine grid search
over the sum of squared errors. No scipy needed, deterministic, and it recovers known
parameters from noisy samples (tests/test_reports_queueing.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sitsprof.calibration import QueueingFit as CurveParameters
from sitsprof.calibration import queueing_curve

__all__ = ["QueueingFit", "fit_queueing", "queueing_curve"]


@dataclass(frozen=True)
class QueueingFit(CurveParameters):
    """The curve's parameters (the calibration's `QueueingFit`: predict, load_at) and how well
    they fit the run's points; `to_dict` gives what a calibration's ``fit_p50`` holds and more
    (the schema reads ``l0``, ``a``, ``u_max``, ``b``)."""

    rmse: float
    r2: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def _solve_linear(g: np.ndarray, y: np.ndarray):
    """Least squares y ~ l0 + a*g for a batch of basis rows g (k, n); returns l0, a, sse (k,)."""
    gm = g.mean(axis=1)
    ym = y.mean()
    gc = g - gm[:, None]
    var = (gc * gc).sum(axis=1)
    cov = (gc * (y - ym)[None, :]).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(var > 0, cov / var, 0.0)
    a = np.maximum(a, 0.0)  # latency does not fall as load rises
    l0 = ym - a * gm
    resid = y[None, :] - (l0[:, None] + a[:, None] * g)
    sse = (resid * resid).sum(axis=1)
    return l0, a, sse


def _grid_sse(u: np.ndarray, y: np.ndarray, umax_grid: np.ndarray, b_grid: np.ndarray):
    um, bb = np.meshgrid(umax_grid, b_grid, indexing="ij")
    um, bb = um.ravel(), bb.ravel()
    rho = u[None, :] / um[:, None]
    g = (1.0 - rho) ** -bb[:, None] - 1.0
    l0, a, sse = _solve_linear(g, y)
    best = int(np.nanargmin(sse))
    return um[best], bb[best], l0[best], a[best], sse[best]


def fit_queueing(u, latency, fit_exponent: bool = False, b: float = 1.0,
                 max_ratio: float = 50.0) -> QueueingFit:
    """Fit the queueing curve to (load, latency) points.

    `u` are loads (achieved bandwidth, as a fraction of peak or in bytes/s), `latency` one
    latency statistic per load (e.g. the P50 or P99 at that load level). u_max is searched
    in (max(u), max_ratio * max(u)]; `fit_exponent` also fits b in [0.2, 5], else b is fixed.
    Needs at least 3 points with distinct loads.
    """
    u = np.asarray(u, dtype=np.float64)
    y = np.asarray(latency, dtype=np.float64)
    keep = np.isfinite(u) & np.isfinite(y) & (u >= 0)
    u, y = u[keep], y[keep]
    if u.size < 3 or np.unique(u).size < 3:
        raise ValueError("the queueing fit needs at least 3 points with distinct loads")
    top = float(u.max())
    if top <= 0:
        raise ValueError("the queueing fit needs some points with a positive load")

    # Search over log(u_max/top - 1): dense near saturation, sparse far from it.
    lo_t, hi_t = np.log(1e-4), np.log(max_ratio - 1.0)
    lo_b, hi_b = (np.log(0.2), np.log(5.0)) if fit_exponent else (np.log(b), np.log(b))
    best = None
    for _ in range(6):
        t_grid = np.linspace(lo_t, hi_t, 80)
        b_grid = np.exp(np.linspace(lo_b, hi_b, 40 if fit_exponent else 1))
        umax_grid = top * (1.0 + np.exp(t_grid))
        best = _grid_sse(u, y, umax_grid, b_grid)
        # Zoom in around the best cell.
        t_best = np.log(best[0] / top - 1.0)
        step_t = (hi_t - lo_t) / 79 * 2
        lo_t, hi_t = max(t_best - step_t, np.log(1e-6)), t_best + step_t
        if fit_exponent:
            b_best = np.log(best[1])
            step_b = (hi_b - lo_b) / 39 * 2
            lo_b, hi_b = b_best - step_b, b_best + step_b
    u_max, b_fit, l0, a, sse = best
    n = y.size
    sst = float(((y - y.mean()) ** 2).sum())
    return QueueingFit(
        l0=float(l0), a=float(a), u_max=float(u_max), b=float(b_fit),
        rmse=float(np.sqrt(sse / n)),
        r2=float(1.0 - sse / sst) if sst > 0 else 1.0,
        n=int(n),
    )
