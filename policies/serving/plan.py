"""`policy plan`: the fewest replicas that serve a trace within a latency SLO.

A replica here is one engine with its own GPUs and its own pool (`policy replay --instances
N`, routing.py); `fewest_instances` searches N: 1, 2, 4, ... until a count meets the SLO, then
bisects between the last count that missed and the first that met, so the answer N comes with
N - 1 replayed and missing (unless N is 1). Every replay it ran is a step of the answer.

A count meets the SLO when its aggregate row (every request of every replica) has TTFT P99
and TPOT P99 within the targets and no replica is saturated (saturation.py: a replica that
cannot keep up has latencies that grow with the trace's length, so a short trace could pass
by luck). The targets are `--slo-ttft-p99` and `--slo-tpot-p99` in ms, with slo.py's defaults
(one source for `policy replay`'s verdict and this search); latency is not monotone in N to the millisecond (routing
changes which requests share a replica), so the bisection assumes what holds in the large:
more replicas never queue more.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import ServingReplayError
from .slo import DEFAULT_TPOT_P99_MS, DEFAULT_TTFT_P99_MS

__all__ = ["MAX_INSTANCES", "fewest_instances", "meets", "step_lines"]

MAX_INSTANCES = 1024


def meets(row: dict, ttft_p99_ms: float, tpot_p99_ms: float) -> tuple[bool, str]:
    """(meets, why) of one aggregate (or single-replica) replay row against the targets."""
    ttft, tpot = row.get("ttft_p99_ms"), row.get("tpot_p99_ms")
    misses = []
    if row.get("saturated"):
        misses.append("saturated")
    if row.get("rejected"):
        misses.append(f"{row['rejected']:,} rejected")
    if ttft is None or not math.isfinite(ttft) or ttft > ttft_p99_ms:
        misses.append(f"TTFT P99 {ttft / 1e3:,.3f} s > {ttft_p99_ms / 1e3:g} s" if ttft is not None
                      and math.isfinite(ttft) else "no TTFT")
    if tpot is not None and math.isfinite(tpot) and tpot > tpot_p99_ms:
        misses.append(f"TPOT P99 {tpot:,.1f} ms > {tpot_p99_ms:g} ms")
    return (not misses, "; ".join(misses) if misses else "meets")


def fewest_instances(evaluate: Callable[[int], dict], ttft_p99_ms: float = DEFAULT_TTFT_P99_MS,
                     tpot_p99_ms: float = DEFAULT_TPOT_P99_MS, max_instances: int = MAX_INSTANCES,
                     on_step: Callable[[dict], None] | None = None) -> dict:
    """Search the fewest instances N whose `evaluate(N)` row meets the targets (module
    docstring). Returns {"instances": N or None, "steps": [...], "targets": ...}; each step
    is {instances, meets, why, ttft_p99_ms, tpot_p99_ms, saturated, row}."""
    if not (ttft_p99_ms > 0 and tpot_p99_ms > 0):
        raise ServingReplayError("--slo-ttft-p99 and --slo-tpot-p99 must be positive durations (2s, 100ms)")
    if max_instances < 1:
        raise ServingReplayError(f"--max-instances {max_instances}: must be at least 1")
    steps: list[dict] = []
    seen: dict[int, bool] = {}

    def check(n: int) -> bool:
        if n in seen:
            return seen[n]
        row = evaluate(n)
        ok, why = meets(row, ttft_p99_ms, tpot_p99_ms)
        step = {"instances": n, "meets": ok, "why": why, "ttft_p99_ms": row.get("ttft_p99_ms"),
                "tpot_p99_ms": row.get("tpot_p99_ms"), "saturated": row.get("saturated"), "row": row}
        steps.append(step)
        if on_step is not None:
            on_step(step)
        seen[n] = ok
        return ok

    lo, n = 0, 1
    while not check(n):
        lo = n
        if n >= max_instances:
            return {"instances": None, "steps": steps, "targets": _targets(ttft_p99_ms, tpot_p99_ms),
                    "why": f"{max_instances} instances still miss (raise --max-instances)"}
        n = min(2 * n, max_instances)
    hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if check(mid):
            hi = mid
        else:
            lo = mid
    return {"instances": hi, "steps": steps, "targets": _targets(ttft_p99_ms, tpot_p99_ms),
            "one_fewer": lo or None,
            "why": (f"{hi} meets; {lo} misses ({next(s['why'] for s in steps if s['instances'] == lo)})" if lo
                    else "1 instance meets")}


def _targets(ttft: float, tpot: float) -> dict:
    return {"ttft_p99_ms": ttft, "tpot_p99_ms": tpot,
            "defaults": {"ttft_p99_ms": DEFAULT_TTFT_P99_MS, "tpot_p99_ms": DEFAULT_TPOT_P99_MS}}


def step_lines(result: dict) -> list[str]:
    """The search, a line a step, and the answer."""
    t = result["targets"]
    lines = [f"plan: the fewest instances with TTFT P99 <= {t['ttft_p99_ms'] / 1e3:g} s and TPOT P99 <= "
             f"{t['tpot_p99_ms']:g} ms, no replica saturated"]
    for s in result["steps"]:
        ttft = s["ttft_p99_ms"]
        lines.append(f"  {s['instances']:>4} instance(s): TTFT P99 "
                     + (f"{ttft / 1e3:,.3f} s" if ttft is not None and math.isfinite(ttft) else "-")
                     + (f", TPOT P99 {s['tpot_p99_ms']:,.1f} ms" if s["tpot_p99_ms"] is not None else "")
                     + f" -> {'meets' if s['meets'] else 'misses: ' + s['why']}")
    lines.append(f"answer: {result['instances']} instance(s) ({result['why']})" if result["instances"]
                 else f"answer: none ({result['why']})")
    return lines
