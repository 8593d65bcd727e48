"""The policy half of `sitsprof demo`: the seeded workload, its replays, their files and their prices.

The demo has to work on a fresh install with no download and no GPU, so its workload is the
seeded three-stack generator and its capacities are fractions of that workload's distinct
blocks (from a cache that holds little more than the shared system prompts to one that
holds half of everything ever seen). The report half (calibration from a bundled run, the
HTML) is `sitsprof.reports.demo`; it receives `policy_results` as a function, so neither
package imports the other and `cli/demo.py` joins them.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sitsprof.calibration import Calibration
from sitsprof.common import jsonout
from sitsprof.common.atomic import atomic_write_text

from .engine.capacity import fraction_capacities
from .engine.results import FORMAT, FORMAT_VERSION, result_rows, rows_to_csv, trace_summary
from .registry import get_policy
from .sweep import run_policies, simulate_costed
from .traces import generator
from .traces.trace import Trace

__all__ = [
    "DEMO_FRACTIONS",
    "DEMO_PARAMS",
    "DemoWorkload",
    "demo_workload",
    "policy_results",
    "price_results",
    "replay",
    "sits_timeline",
    "warm_up",
    "write_results",
]

DEMO_FRACTIONS = (0.01, 0.05, 0.10, 0.25, 0.50)
# semantic-shard keys its shards by the generated prompts, embedded (hashed n-grams, no model)
# and clustered online by cosine similarity (adaptive/embedding.py); clustered once, reused at
# every capacity.
DEMO_PARAMS = {"semantic-shard": {"shard_key": "embedding", "embedder": "hashed"}}


@dataclass
class DemoWorkload:
    """The generated workload and what the demo replays it through."""

    seed: int
    duration_s: float
    requests: list
    trace: Trace
    capacities: list[int]
    policies: list[str]
    started: float  # time.perf_counter() when the demo began


def demo_workload(seed: int, duration_s: float, policies: Sequence[str]) -> DemoWorkload:
    """The three-stack workload of `seed` over `duration_s` seconds, with prompt texts (semantic-shard
    clusters them), at the demo's capacities."""
    started = time.perf_counter()
    requests = generator.generate_requests(seed=seed, duration_s=duration_s, prompts=True)
    trace = generator.requests_to_trace(requests, source=f"generator(seed={seed}, duration_s={duration_s:g})")
    return DemoWorkload(seed, duration_s, requests, trace, fraction_capacities(trace.n_blocks, DEMO_FRACTIONS),
                        list(policies), started)


def warm_up(workload: DemoWorkload, progress=None) -> None:
    """One untimed replay of every policy over the whole trace at the smallest capacity.

    So every policy's numba kernels are compiled (or loaded from the cache) before the timed
    replay; else the first row's time is mostly the JIT compile (seconds on a fresh install)
    rather than the replay (milliseconds). The whole trace, not a prefix: which kernels run
    depends on the controller's decisions. `progress(done, total, label)` after each policy."""
    run_policies(workload.trace, workload.policies, workload.capacities[:1], progress=progress, params=DEMO_PARAMS)


def replay(workload: DemoWorkload, progress=None, warm: bool = False) -> list:
    """Every policy at every capacity, priced (`sweep.run_policies`), after `warm_up` unless
    `warm` (the caller has warmed up, under its own progress display)."""
    if not warm:
        warm_up(workload)
    return run_policies(workload.trace, workload.policies, workload.capacities, progress=progress, params=DEMO_PARAMS)


def write_results(out_dir, workload: DemoWorkload, results: Sequence) -> tuple[dict, list[Path]]:
    """results.json, results.csv and workload.jsonl (Mooncake format, so `sitsprof policy
    simulate <out>/workload.jsonl` replays it again) in the existing folder `out_dir`;
    returns the JSON document and the paths written."""
    out = Path(out_dir)
    trace, requests = workload.trace, workload.requests
    rows = result_rows(results, trace)
    summary = trace_summary(trace, fmt="generator")
    summary["stacks"] = {
        s.name: {"requests": sum(1 for r in requests if r.model_stack == s.name)} for s in generator.DEFAULT_STACKS
    }
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "workload": summary,
        "seed": workload.seed,
        "duration_s": workload.duration_s,
        "capacities": workload.capacities,
        "policies": workload.policies,
        "results": rows,
        "wall_seconds": round(time.perf_counter() - workload.started, 3),
    }
    paths = [out / "results.json", out / "results.csv", out / "workload.jsonl"]
    atomic_write_text(paths[0], jsonout.dumps(doc, indent=2) + "\n")
    atomic_write_text(paths[1], rows_to_csv(rows))
    generator.write_mooncake_jsonl(requests, paths[2])
    return doc, paths


def _cost_of(trace, result, calibration: Calibration) -> dict:
    """The cost model's summary for one result on `calibration`: the result's own when it was
    priced on the same calibration (`simulate_costed` did it), else priced again."""
    cost = (result.extra or {}).get("cost")
    if isinstance(cost, dict) and cost.get("calibration") == calibration.name and "ttft_p99_ms" in cost:
        return cost
    return simulate_costed(trace, result.policy, result.capacity, calibration=calibration).extra["cost"]


def price_results(trace, results: Sequence, calibration: Calibration) -> list[dict]:
    """Result rows (SimResult.to_dict) with the cost model's TTFT P50/P99 and tokens/s in `extra`."""
    rows = []
    for r in results:
        row = r.to_dict()
        cost = _cost_of(trace, r, calibration) or {}
        row["extra"] = {"p99_ms": cost.get("ttft_p99_ms"), "p50_ms": cost.get("ttft_p50_ms"),
                        "tokens_per_s": cost.get("tokens_per_s")}
        rows.append(row)
    return rows


def sits_timeline(trace, capacity: int, calibration: Calibration, results: Sequence = ()) -> list[dict]:
    """The SITS controller's per-window decisions at `capacity`: from the demo's own SITS result
    when it has one at that capacity on this calibration, else from one SITS run."""
    found = [r for r in results if r.policy == "sits" and r.capacity == capacity and (r.extra or {}).get("events")
             and (r.extra.get("cost") or {}).get("calibration") == calibration.name]
    if found:
        events = found[0].extra["events"]
    else:
        events = get_policy("sits").run(trace, capacity, calibration=calibration).extra.get("events", [])
    names = {"time": "time", "d_ms": "window P99 TTFT (ms)", "H": "access entropy H (bits)",
             "score": "migration score", "to": "behaviour"}
    return [{names[k]: e[k] for k in names if k in e} for e in events if e.get("event") == "decision"]


def policy_results(trace, results: Sequence, calibration: Calibration) -> dict:
    """The demo's policy-results document on `calibration`: every result priced, and the SITS
    decision timeline at the middle capacity (docs/policy-results.md); `calibration` is read once here."""
    calibration = Calibration.of(calibration)
    rows = price_results(trace, results, calibration)
    capacities = sorted({r.capacity for r in results})
    middle = capacities[len(capacities) // 2] if capacities else None
    timeline = sits_timeline(trace, middle, calibration, results) if capacities else []
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "calibration": calibration.name,
            "results": rows, "decisions": timeline, "decisions_capacity": middle}
