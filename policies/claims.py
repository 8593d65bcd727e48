"""The project brief's claims, re-run rather than repeated, each with a verdict.

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

__all__ = [
    "BLOCK_LRU",
    "CLAIMS",
    "FAILS",
    "HOLDS",
    "METRICS",
    "MOONCAKE_CAPACITIES",
    "NOT_RUN",
    "PREFIX",
    "UNDER_LOAD_BLOCK_TOKENS",
    "UNDER_LOAD_CLAIMS",
    "UNDER_LOAD_POOLS",
    "UNDER_LOAD_RATES",
    "UNKNOWN",
    "Check",
    "Claim",
    "claim_rows",
    "run_claims",
    "run_claims_under_load",
    "verdicts",
]


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


# ------------------------------------------------------------------ under load (serving replay)
# The claims re-run through the serving replay (policies/serving, `policy replay`): requests in
# flight, vLLM's rules, a step time model, the trace's arrivals at x0.25 (spread out) and
# compressed x1, x2, x4. What the replay can and cannot compare (docs/RESEARCH.md, "Under load"):
# - "prefix cache" is the engine's own count: vLLM reuses only the longest cached prefix of a
#   request's full blocks (LRU free queue, blocks of running requests pinned); "LRU" is the
#   block-level count of an LRU cache of the same pool, any resident block a hit (the replay's
#   all-evictable mode: policy simulate's count, with no pinning, so it does not depend on load).
# - semantic shard is not run: it has no incremental form, and a semantic shard is a routing
#   decision across instances by embedding, which the replay does not model.
UNDER_LOAD_RATES = (0.25, 1.0, 2.0, 4.0)  # 0.25: one rate where the engine keeps up
UNDER_LOAD_POOLS = (0.03, 0.10)  # of the trace's 16-token KV blocks
UNDER_LOAD_BLOCK_TOKENS = 16
PREFIX, BLOCK_LRU = "vllm-prefix", "lru-blocks"
NOT_RUN = {"semantic-shard": "not run: no incremental form, and a semantic shard is a routing decision "
                             "across instances, which the replay does not model"}
UNDER_LOAD_CLAIMS = (
    Claim(f"{BLOCK_LRU},{PREFIX},semantic-shard", CLAIMS[0].text,
          (Check("block_hit_ratio", "semantic-shard", PREFIX), Check("block_hit_ratio", PREFIX, BLOCK_LRU))),
    Claim("lirs,lru,lfu", CLAIMS[1].text,
          (Check("block_hit_ratio", "lirs", "lru"), Check("ttft_p95_ms", "lirs", "lru", higher=False),
           Check("output_tokens_per_s", "lirs", "lru"))),
)
METRICS["output_tokens_per_s"] = ("output tok/s", "{:,.1f}")
_LOAD_FIELDS = ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "queue_wait_p99_ms", "tokens_per_s",
                "output_tokens_per_s", "requests_per_s", "block_hit_ratio", "prefix_hit_ratio", "preemptions",
                "rejected", "completed")


def _load_row(policy, summary, **extra):
    row = {"policy": policy, "capacity": int(summary["capacity"]), "rate_scale": float(summary["rate_scale"])}
    row.update({k: summary.get(k) for k in _LOAD_FIELDS})
    row.update(extra)
    return row


def run_claims_under_load(trace, name="mooncake", rates=UNDER_LOAD_RATES, pools=UNDER_LOAD_POOLS, calibration=None,
                          block_tokens=UNDER_LOAD_BLOCK_TOKENS, engine="vllm", replay=None,
                          progress=None) -> list[dict]:
    """Both claims through the serving replay of `trace` at each arrival-rate scale and pool
    (a fraction of its KV blocks): [{workload, blocks, claim, rows, verdicts}] like
    `run_claims`, each row and verdict with its `rate_scale`. `replay(policy, capacity,
    rate_scale, all_evictable)` -> ReplayResult (default: scheduler.run_replay on `trace`);
    `progress(done, total, label)` is called before each replay."""
    from .serving.reblock import reblock
    from .serving.scheduler import run_replay

    rb = reblock(trace, block_tokens)
    if replay is None:
        def replay(policy, capacity, rate_scale, all_evictable=False):
            return run_replay(trace, policy, capacity, engine=engine, block_tokens=block_tokens,
                              rate_scale=rate_scale, calibration=calibration, reblocked=rb,
                              all_evictable=all_evictable)
    caps = [max(int(rb.n_ids * f), 1) for f in pools]
    jobs = [(p, c, s) for c in caps for s in rates for p in ("lru", "lirs", "lfu")]
    total = len(jobs) + len(caps)
    served = {}
    for i, (p, c, s) in enumerate(jobs):
        if progress is not None:
            progress(i, total, f"{p} at {c:,} blocks, arrivals x{s:g}")
        served[(p, c, s)] = replay(p, c, s).summary()
    blocks = {}
    for i, c in enumerate(caps):  # the block-level count: no pinning, so the same at every rate
        if progress is not None:
            progress(len(jobs) + i, total, f"lru block count at {c:,} blocks")
        r = replay("lru", c, rates[0], True)
        blocks[c] = float(r.ref_hit.mean()) if r.ref_hit is not None and len(r.ref_hit) else None
    document = []
    for claim in UNDER_LOAD_CLAIMS:
        rows = []
        for s in rates:
            for c in caps:
                for p in claim.policies.split(","):
                    if p == PREFIX:
                        rows.append(_load_row(PREFIX, served[("lru", c, s)]))
                    elif p == BLOCK_LRU:
                        rows.append({"policy": BLOCK_LRU, "capacity": c, "rate_scale": float(s),
                                     **dict.fromkeys(_LOAD_FIELDS), "block_hit_ratio": blocks[c],
                                     "note": "any resident block a hit (all-evictable mode, no pinning, load-free)"})
                    elif p in NOT_RUN:
                        rows.append({"policy": p, "capacity": c, "rate_scale": float(s), **dict.fromkeys(_LOAD_FIELDS),
                                     "note": NOT_RUN[p]})
                    else:
                        rows.append(_load_row(p, served[(p, c, s)]))
        out = []
        for s in rates:
            for v in verdicts(claim, [r for r in rows if r["rate_scale"] == s]):
                out.append({"rate_scale": float(s), **v})
        document.append({"workload": f"{name} (serving replay, {engine} rules)",
                         "blocks": int(rb.n_ids), "claim": claim.text, "rows": rows, "verdicts": out,
                         "under_load": {"engine": engine, "block_tokens": int(block_tokens), "rates": list(rates),
                                        "pools": list(pools), "capacities": caps}})
    return document
