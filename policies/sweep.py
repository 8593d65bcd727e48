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

import importlib
from collections.abc import Callable, Iterable
from types import ModuleType

from sitsprof.calibration import Calibration

from .cost.costmodel import CostModel
from .cost.models import DEFAULT_MODEL
from .engine.capacity import check_capacity
from .engine.metrics import result_metrics
from .engine.params import bind, check_params
from .engine.protocol import capabilities
from .engine.replay import Prepared, SimResult, as_trace, run_kernel
from .engine.tenancy import ctcci
from .parallel import auto_jobs, check_jobs, map_runs
from .registry import get_policy
from .traces.trace import Trace

__all__ = [
    "bind_params",
    "policy_module",
    "run_policies",
    "simulate",
    "simulate_costed",
    "simulate_many",
    "simulate_many_costed",
]

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
    jobs: int | None = 1,
    cluster=None,
) -> list[SimResult]:
    """Every policy at every capacity (policy-major order); `progress(done, total, label)` after each.
    `jobs` worker processes (None: `parallel.auto_jobs`) or a Dask `cluster` (see `policies.parallel`):
    the same results in the same order."""
    modules = [policy_module(p) for p in policies]
    caps = [check_capacity(c) for c in capacities]
    if jobs != 1 or cluster is not None:
        items = [(m.__name__, c, {}) for m in modules for c in caps]
        return _in_parallel(_plain_task, as_trace(trace), items, None, jobs, cluster, progress)
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
    if capabilities(module).adaptive:
        check_params(module, params)
        offsets = None if prepared is None else prepared.offsets
        return module.run(trace, capacity, calibration=calibration, model=model, miss=miss, offsets=offsets, **params)
    prep = Prepared(trace) if prepared is None else prepared
    result = run_kernel(prep, module, capacity, params)
    cost = CostModel(calibration, model=model, miss=miss)
    result.extra.update(cost=cost.summarize(trace, prep.hit, offsets=prep.offsets), tenancy=ctcci(trace, prep.hit))
    return result


def simulate_many_costed(trace: Trace, policies, capacities, progress: Progress | None = None, params=None,
                         jobs: int | None = 1, cluster=None, **cost) -> list[SimResult]:
    """simulate_costed for every policy at every capacity (policy-major), `progress(done, total, label)`;
    `params`: {policy name: {parameter: value}} (see bind_params); `jobs`, `cluster`: as simulate_many."""
    total = len(policies) * len(capacities)
    if total:  # read the calibration file and prepare the trace once, not once per run
        calibration = cost.pop("calibration", None)
        cost["calibration"] = Calibration.of(calibration)
        if jobs != 1 or cluster is not None:
            modules = [policy_module(p) for p in policies]
            items = [(m.__name__, check_capacity(c), (params or {}).get(m.NAME, {})) for m in modules
                     for c in capacities]
            return _in_parallel(_costed_task, trace, items, cost, jobs, cluster, progress)
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
                 model=None, miss: str = "recompute", params=None, jobs: int | None = 1,
                 cluster=None) -> list[SimResult]:
    """Every policy at every capacity through the cost model (`simulate_many_costed`), each
    result with its Prometheus figures in ``extra["metrics"]`` (also in --json);
    `params`: {policy: {name: value}} from bind_params; `jobs`, `cluster`: as simulate_many."""
    results = simulate_many_costed(trace, policies, capacities, progress=progress, calibration=calibration,
                                   model=model or DEFAULT_MODEL, miss=miss, params=params, jobs=jobs,
                                   cluster=cluster)
    for r in results:
        r.extra["metrics"] = result_metrics(r, trace.span_s)
    return results


# The sweeps' runs as `parallel.map_runs` tasks: an item is (policy module name, capacity, its
# parameters); modules travel by name, each worker's `Prepared` arrays are built once (setup).

def _plain_task(trace: Trace, prep: Prepared, item, shared) -> SimResult:
    module_name, capacity, own = item
    return run_kernel(prep, importlib.import_module(module_name), capacity, own)


def _costed_task(trace: Trace, prep: Prepared, item, shared) -> SimResult:
    module_name, capacity, own = item
    return simulate_costed(trace, importlib.import_module(module_name), capacity, prepared=prep, **shared, **own)


def _in_parallel(task, trace: Trace, items: list, shared, jobs, cluster, progress) -> list[SimResult]:
    """`items` through `parallel.map_runs` (`jobs` None: auto_jobs), every distinct policy's
    first run warmed up here first so its kernels compile once."""
    jobs = check_jobs(jobs)
    if jobs is None:
        jobs = auto_jobs(len(items), len(trace))
    shared = {k: v for k, v in (shared or {}).items() if k != "prepared"}
    labels = [f"{importlib.import_module(name).NAME} @ {capacity}" for name, capacity, _ in items]
    warm = list({name: (name, capacity, own) for name, capacity, own in reversed(items)}.values())
    return map_runs(task, trace, items, shared, setup=Prepared, jobs=jobs, cluster=cluster, progress=progress,
                    labels=labels, warm_items=warm)
