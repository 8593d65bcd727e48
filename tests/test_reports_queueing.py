"""The loaded-latency queueing fit recovers the parameters it was given."""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.reports.queueing import fit_queueing, queueing_curve


@pytest.mark.parametrize("l0,a,u_max", [(640.0, 35.0, 0.96), (280.0, 12.0, 1.0), (32.0, 4.0, 0.8)])
def test_mm1_fit_recovers_known_parameters(l0, a, u_max):
    rng = np.random.default_rng(7)
    u = np.linspace(0.02, 0.95 * u_max, 16)
    y = queueing_curve(u, l0, a, u_max) + rng.normal(0, 0.005 * l0, u.size)
    fit = fit_queueing(u, y)
    assert fit.l0 == pytest.approx(l0, rel=0.02)
    assert fit.a == pytest.approx(a, rel=0.15)
    assert fit.u_max == pytest.approx(u_max, rel=0.02)
    assert fit.r2 > 0.98 and fit.b == 1.0


def test_exponent_fit_recovers_b():
    u = np.linspace(0.0, 0.9, 20)
    y = queueing_curve(u, 600.0, 20.0, 0.95, 2.0)
    fit = fit_queueing(u, y, fit_exponent=True)
    assert fit.b == pytest.approx(2.0, rel=0.05)
    assert fit.u_max == pytest.approx(0.95, rel=0.01)
    assert fit.predict([0.5])[0] == pytest.approx(queueing_curve(0.5, 600, 20, 0.95, 2.0), rel=0.01)


def test_load_at_inverts_predict():
    u = np.linspace(0.1, 0.9, 9)
    fit = fit_queueing(u, queueing_curve(u, 500.0, 30.0, 0.97))
    for target in (550.0, 900.0):
        assert fit.predict([fit.load_at(target)])[0] == pytest.approx(target, rel=1e-6)
    assert np.isnan(fit.load_at(100.0))


def test_flat_latency_gives_zero_queueing_term():
    u = np.linspace(0.1, 0.9, 9)
    fit = fit_queueing(u, np.full(9, 300.0))
    assert fit.a == pytest.approx(0.0, abs=1e-9) and fit.l0 == pytest.approx(300.0)


def test_too_few_points():
    with pytest.raises(ValueError, match="at least 3"):
        fit_queueing([0.1, 0.2], [1.0, 2.0])


def test_the_fit_a_run_writes_is_the_curve_a_calibration_reads():
    """One curve across the seam: what the report fits, written as fit_p50 and read back as the
    calibration's QueueingFit, predicts the same latency and inverts the same way."""
    from sitsprof.calibration import QueueingFit as CurveParameters

    u = np.linspace(0.05, 0.9, 12)
    fit = fit_queueing(u, queueing_curve(u, 640.0, 35.0, 0.96, 1.5), fit_exponent=True)
    written = fit.to_dict()
    assert {"rmse", "r2", "n"} <= set(written)
    read = CurveParameters(*(written[k] for k in ("l0", "a", "u_max", "b")))
    assert isinstance(fit, CurveParameters)
    grid = np.linspace(0.0, 0.99, 50)
    assert np.array_equal(read.predict(grid), fit.predict(grid))
    assert read.load_at(900.0) == fit.load_at(900.0)
