"""The brief's claims (DESIGN.md), re-run rather than repeated.

Each claim is a comparison of policies; `run_claims` replays them, priced by the cost model,
on the seeded three-stack workload (capacities 1%/10%/50% of its distinct blocks) and, when
given, a Mooncake trace (at 1000, 10000, 50000 blocks), and returns rows that set the
figures the claim quotes beside the measured ones.
"""
from __future__ import annotations

from .engine.capacity import fraction_capacities
from .engine.results import tenant_hit_ratios
from .registry import select_policies
from .sweep import run_policies
from .traces import generator

CLAIMS = (
    ("lru,prefix_lru,semantic-shard", "claimed hit: LRU 21% / prefix cache 44% / semantic shard 69% (128K context)"),
    ("lirs,lru,lfu", "claimed: LIRS 63.2% hit, 2.1 TPS, 417 ms P95 vs LRU 48.7%, 1.6 TPS, 589 ms"),
)
MOONCAKE_CAPACITIES = (1000, 10000, 50000)


def claim_rows(trace, results) -> list[dict]:
    """One row per result: hit ratios (per model stack too), P95/P99 TTFT and tokens/s."""
    rows = []
    for r in results:
        cost = r.extra.get("cost") or {}
        stacks = tenant_hit_ratios(trace, r.request_hits, keep_empty=True)
        rows.append({"policy": r.policy, "capacity": r.capacity, "block_hit_ratio": r.block_hit_ratio,
                     "prefix_hit_ratio": r.prefix_hit_ratio, "ttft_p95_ms": cost.get("ttft_p95_ms"),
                     "ttft_p99_ms": cost.get("ttft_p99_ms"), "tokens_per_s": cost.get("tokens_per_s"),
                     "stack_hit_ratio": stacks})
    return rows


def run_claims(seed: int = 0, mooncake=None, calibration=None, sweep=run_policies) -> list[dict]:
    """Every claim on every workload: [{workload, blocks, claim, rows}, ...] in that order.
    `mooncake`: a Trace read from a Mooncake file, or None; `sweep(trace, policies,
    capacities, calibration=...)` replays (default `sweep.run_policies`; the CLI passes one
    that draws a progress bar)."""
    requests = generator.generate_requests(seed=seed)
    trace = generator.requests_to_trace(requests, source=f"generator(seed={seed})")
    workloads = [("three-stack", trace, fraction_capacities(trace.n_blocks, (0.01, 0.1, 0.5)))]
    if mooncake is not None:
        workloads.append(("mooncake", mooncake, list(MOONCAKE_CAPACITIES)))
    document = []
    for name, tr, caps in workloads:
        for policy_text, claim in CLAIMS:
            results = sweep(tr, select_policies(policy_text), caps, calibration=calibration)
            document.append({"workload": name, "blocks": int(tr.n_blocks), "claim": claim,
                             "rows": claim_rows(tr, results)})
    return document
