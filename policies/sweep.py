"""Replay policies by name: one run, or every policy at every capacity, plain or priced.

The top of the policy engine, beside the registry: the layers below replay a policy
*module* and know no names, so the lookup by name (and with it the choice between a
classic kernel and an adaptive policy's `run`) happens only here.

- `simulate(trace, "lru", 10_000)` and `simulate_many`: hit ratios, the engine's kernel path;
- `simulate_costed` and `simulate_many_costed`: the same replays priced by the cost model
  (``extra``: ``cost``, ``tenancy``); adaptive policies get the trace, so time windows, TTL
  and their event logs apply;
- `run_policies`: the costed sweep the commands print, each result with its Prometheus
  figures in ``extra["metrics"]``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType

from sitsprof.calibration import load_calibration

from .adaptive.metrics import result_metrics
from .adaptive.tenancy import ctcci
from .cost.costmodel import CostModel
from .cost.models import DEFAULT_MODEL
from .engine.capacity import check_capacity
from .engine.params import bind, check_params
from .engine.replay import Prepared, SimResult, as_trace, run_kernel
from .registry import get_policy
from .traces.trace import Trace

Progress = Callable[[int, int, str], None]


def policy_module(policy) -> ModuleType:
    """`policy` as its module: a module as is, a name through the registry."""
    return policy if isinstance(policy, ModuleType) else get_policy(str(policy))


def bind_params(policies, given: dict) -> dict:
    """`engine.params.bind` for policies given by name (or module)."""
    return bind([policy_module(p) for p in policies], given)


def simulate(trace, policy, capacity, **params) -> SimResult:
    """Replay `trace` (a Trace or 1-D block ids) through `policy` (name or module) at `capacity` blocks."""
    module = policy_module(policy)
    capacity = check_capacity(capacity)
    return run_kernel(Prepared(as_trace(trace)), module, capacity, params)


def simulate_many(
    trace,
    policies: Iterable,
    capacities: Iterable,
    progress: Progress | None = None,
) -> list[SimResult]:
    """Every policy at every capacity (policy-major order); `progress(done, total, label)` after each."""
    modules = [policy_module(p) for p in policies]
    caps = [check_capacity(c) for c in capacities]
    prep = Prepared(as_trace(trace))
    total = len(modules) * len(caps)
    results: list[SimResult] = []
    for module in modules:
        for capacity in caps:
            results.append(run_kernel(prep, module, capacity, {}))
            if progress is not None:
                progress(len(results), total, f"{module.NAME} @ {capacity}")
    return results


def simulate_costed(trace: Trace, policy, capacity, calibration=None, model: str = DEFAULT_MODEL,
                    miss: str = "recompute", prepared=None, **params) -> SimResult:
    """Replay one policy and price it: a SimResult whose ``extra`` carries ``cost`` (TTFT
    percentiles, tokens/s) and ``tenancy`` (CTCCI). Classic policies replay through the
    engine's own path (parameter checks, timing, summary); adaptive policies (those with a
    ``run`` function: sits, semantic-shard) get the calibration and their own parameters.
    `prepared`: the engine's per-trace arrays when the caller replays the trace many times."""
    module = policy_module(policy)
    capacity = check_capacity(capacity)
    if hasattr(module, "run"):
        check_params(module, params)
        offsets = None if prepared is None else prepared.offsets
        return module.run(trace, capacity, calibration=calibration, model=model, miss=miss, offsets=offsets, **params)
    prep = Prepared(trace) if prepared is None else prepared
    result = run_kernel(prep, module, capacity, params)
    cost = CostModel(calibration, model=model, miss=miss)
    result.extra.update(cost=cost.summarize(trace, prep.hit, offsets=prep.offsets), tenancy=ctcci(trace, prep.hit))
    return result


def simulate_many_costed(trace: Trace, policies, capacities, progress: Progress | None = None, params=None,
                         **cost) -> list[SimResult]:
    """simulate_costed for every policy at every capacity (policy-major), `progress(done, total, label)`;
    `params`: {policy name: {parameter: value}} (see bind_params)."""
    total = len(policies) * len(capacities)
    if total:  # read the calibration file and prepare the trace once, not once per run
        calibration = cost.pop("calibration", None)
        cost["calibration"] = calibration if isinstance(calibration, dict) else load_calibration(calibration)
        cost["prepared"] = Prepared(trace)
    results = []
    for policy in policies:
        own = (params or {}).get(policy_module(policy).NAME, {})
        for capacity in capacities:
            results.append(simulate_costed(trace, policy, capacity, **cost, **own))
            if progress is not None:
                progress(len(results), total, f"{results[-1].policy} @ {capacity}")
    return results


def run_policies(trace: Trace, policies, capacities, progress: Progress | None = None, calibration=None,
                 model=None, miss: str = "recompute", params=None) -> list[SimResult]:
    """Every policy at every capacity through the cost model (`simulate_many_costed`), each
    result with its Prometheus figures in ``extra["metrics"]`` (also in --json);
    `params`: {policy: {name: value}} from bind_params."""
    results = simulate_many_costed(trace, policies, capacities, progress=progress, calibration=calibration,
                                   model=model or DEFAULT_MODEL, miss=miss, params=params)
    for r in results:
        r.extra["metrics"] = result_metrics(r, trace.span_s)
    return results
