"""The brief's claims (DESIGN.md), re-run rather than repeated, each with a verdict.

Each claim is a comparison of policies; `run_claims` replays them, priced by the cost model,
on the seeded three-stack workload (capacities 1%/10%/50% of its distinct blocks) and, when
given, a Mooncake trace (at 1000, 10000, 50000 blocks), and returns rows that set the
figures the claim quotes beside the measured ones, and a verdict per capacity.

What a verdict checks is the comparison the claim makes, not its absolute figures (those were
quoted for other workloads, e.g. a 128K context): for the hit-ratio claim, that the policies
rank as claimed (semantic shard > prefix cache > LRU); for LIRS, that it beats LRU on hit
ratio, P95 TTFT and tokens/s. A capacity's verdict is "holds" when every check it could make
holds, "does not hold" when one fails (both with the measured numbers), "not measured" when
no figure was there to compare (tokens/s needs output lengths in the trace).
"""
from __future__ import annotations

from dataclasses import dataclass

from .engine.capacity import fraction_capacities
from .engine.results import tenant_hit_ratios
from .registry import select_policies
from .sweep import run_policies
from .traces import generator


@dataclass(frozen=True)
class Check:
    """`better` beats `worse` on row field `metric`; `higher` says which way is better."""

    metric: str
    better: str
    worse: str
    higher: bool = True


@dataclass(frozen=True)
class Claim:
    policies: str
    text: str
    checks: tuple[Check, ...]


CLAIMS = (
    Claim("lru,prefix_lru,semantic-shard",
          "claimed hit: LRU 21% / prefix cache 44% / semantic shard 69% (128K context)",
          (Check("block_hit_ratio", "semantic-shard", "prefix_lru"), Check("block_hit_ratio", "prefix_lru", "lru"))),
    Claim("lirs,lru,lfu", "claimed: LIRS 63.2% hit, 2.1 TPS, 417 ms P95 vs LRU 48.7%, 1.6 TPS, 589 ms",
          (Check("block_hit_ratio", "lirs", "lru"), Check("ttft_p95_ms", "lirs", "lru", higher=False),
           Check("tokens_per_s", "lirs", "lru"))),
)
MOONCAKE_CAPACITIES = (1000, 10000, 50000)
#: How a verdict names each metric, and how it prints a figure of it.
METRICS = {"block_hit_ratio": ("block hit", "{:.4f}"), "ttft_p95_ms": ("P95 TTFT ms", "{:,.1f}"),
           "tokens_per_s": ("tok/s, 1 stream", "{:,.2f}")}
HOLDS, FAILS, UNKNOWN = "holds", "does not hold", "not measured"


def claim_rows(trace, results) -> list[dict]:
    """One row per result: hit ratios (per model stack too), P95/P99 TTFT and tokens/s."""
    rows = []
    for r in results:
        cost = r.extra.get("cost") or {}
        stacks = tenant_hit_ratios(trace, r.request_hits, keep_empty=True)
        rows.append({"policy": r.policy, "capacity": r.capacity, "block_hit_ratio": r.block_hit_ratio,
                     "prefix_hit_ratio": r.prefix_hit_ratio, "ttft_p95_ms": cost.get("ttft_p95_ms"),
                     "ttft_p99_ms": cost.get("ttft_p99_ms"), "tokens_per_s": cost.get("tokens_per_s"),
                     "stack_hit_ratio": stacks, "calibration": cost.get("calibration"),
                     "calibration_kind": cost.get("calibration_kind")})
    return rows


def verdicts(claim: Claim, rows: list[dict]) -> list[dict]:
    """Per capacity (in the rows' order): {capacity, verdict, checks: [{metric, better, worse,
    measured: {policy: value}, holds (True/False/None)}], summary}: the claim's comparisons
    on the measured figures."""
    by_capacity: dict[int, dict[str, dict]] = {}
    for row in rows:
        by_capacity.setdefault(row["capacity"], {})[row["policy"]] = row
    out = []
    for capacity, rows_at in by_capacity.items():
        checks, parts = [], []
        for check in claim.checks:
            a = (rows_at.get(check.better) or {}).get(check.metric)
            b = (rows_at.get(check.worse) or {}).get(check.metric)
            name, fmt = METRICS[check.metric]
            if a is None or b is None:
                holds = None
                parts.append(f"{name}: not measured")
            else:
                holds = bool(a > b if check.higher else a < b)
                sign = (">" if a > b else "<" if a < b else "=")
                shown_a, shown_b = fmt.format(a), fmt.format(b)
                if shown_a == shown_b and a != b:  # apart only past the usual digits: show them
                    shown_a, shown_b = f"{a:.6g}", f"{b:.6g}"
                parts.append(f"{name} {check.better} {shown_a} {sign} {check.worse} {shown_b}"
                             + ("" if holds else " (claimed " + ("higher" if check.higher else "lower") + ")"))
            checks.append({"metric": check.metric, "better": check.better, "worse": check.worse,
                           "measured": {check.better: a, check.worse: b}, "holds": holds})
        known = [c["holds"] for c in checks if c["holds"] is not None]
        verdict = UNKNOWN if not known else HOLDS if all(known) else FAILS
        out.append({"capacity": capacity, "verdict": verdict, "checks": checks,
                    "summary": f"{verdict}: " + "; ".join(parts)})
    return out


def run_claims(seed: int = 0, mooncake=None, calibration=None, sweep=run_policies) -> list[dict]:
    """Every claim on every workload: [{workload, blocks, claim, rows, verdicts}, ...] in that
    order. `mooncake`: a Trace read from a Mooncake file, or None; `sweep(trace, policies,
    capacities, calibration=...)` replays (default `sweep.run_policies`; the CLI passes one
    that draws a progress bar)."""
    requests = generator.generate_requests(seed=seed)
    trace = generator.requests_to_trace(requests, source=f"generator(seed={seed})")
    workloads = [("three-stack", trace, fraction_capacities(trace.n_blocks, (0.01, 0.1, 0.5)))]
    if mooncake is not None:
        workloads.append(("mooncake", mooncake, list(MOONCAKE_CAPACITIES)))
    document = []
    for name, tr, caps in workloads:
        for claim in CLAIMS:
            results = sweep(tr, select_policies(claim.policies), caps, calibration=calibration)
            rows = claim_rows(tr, results)
            document.append({"workload": name, "blocks": int(tr.n_blocks), "claim": claim.text,
                             "rows": rows, "verdicts": verdicts(claim, rows)})
    return document
