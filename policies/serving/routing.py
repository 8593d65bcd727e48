"""`policy replay --instances N --routing round-robin|prefix`: N serving instances behind a router.

Two passes (docs/serving-routing.md):

1. Routing, in arrival order (arrival / rate scale), decided before any instance runs, as a
   router decides on what it has sent, never on the instances' state:
   - `round-robin`: request r goes to instance r mod N.
   - `prefix` (cache-aware, after SGLang's router and NVIDIA Dynamo's KV router without KV
     events): the router keeps, per instance, the trace blocks it has sent there with the time
     it last sent each (its approximate index), and an entry older than `ttl_s` is forgotten
     (Dynamo's `--router-ttl-secs`, 120 s). Load is the requests sent to an instance in the last
     `load_window_s` seconds (the router's stand-in for requests outstanding there). If the load
     is imbalanced, (max - min) > `balance_abs` and max > `balance_rel` x min (SGLang's
     `--balance-abs-threshold` 32, `--balance-rel-threshold` 1.0001), the request goes to the
     least loaded instance. Else to the instance whose index matches the longest prefix of the
     request's blocks (tokens matched; ties: less load, then lower index) when the match is more
     than `cache_threshold` of the prompt (SGLang's `--cache-threshold`, 0.5), else to the least
     loaded (SGLang picks the smallest tree there; this router has no tree sizes to compare that
     mean cache room, so it balances instead, as Dynamo's cost does when no worker has overlap).
     Matching is at the trace's own blocks (Mooncake: 512 tokens), coarser than the engine's
     16-token KV blocks, as SGLang's router matches text rather than the engine's pages.
2. Each instance replays its sub-trace alone (`run_replay`, its own pool of `capacity` blocks,
   the same engine settings; seed + instance for the step model's sampled delays).

Results: one `replay_row` per instance (with `instance`, `instances`, `routing`) and one
aggregate row per (policy, capacity): TTFT/TPOT/E2E quantiles over every request of every
instance, tokens and requests per second over the common span (first arrival to the last
instance's last step), hit ratios pooled (hit blocks and tokens summed over instances),
counters summed, `imbalance` = the busiest instance's requests over the mean.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sitsprof.common.jit import njit

from ..errors import ServingReplayError
from .reblock import Reblocked

__all__ = [
    "MAX_INDEX_BYTES",
    "PREFIX",
    "REASONS",
    "ROUND_ROBIN",
    "ROUTINGS",
    "R_BALANCE",
    "R_CACHE",
    "R_LEAST_LOADED",
    "R_ROTATION",
    "RouterSettings",
    "Routes",
    "aggregate_row",
    "check_routing",
    "route",
    "routed_document",
    "routed_table",
    "run_routed",
    "subset",
]

ROUTINGS = ("round-robin", "prefix")
ROUND_ROBIN, PREFIX = 0, 1
# why a request went where it went
R_ROTATION, R_CACHE, R_LEAST_LOADED, R_BALANCE = 0, 1, 2, 3
REASONS = ("rotation", "cache", "least_loaded", "balance")
MAX_INDEX_BYTES = 2 << 30  # the router's last-sent times: instances x trace blocks x 8 bytes


@dataclass(frozen=True)
class RouterSettings:
    ttl_s: float = 120.0  # Dynamo --router-ttl-secs (no KV events)
    load_window_s: float = 60.0
    balance_abs: int = 32  # SGLang --balance-abs-threshold
    balance_rel: float = 1.0001  # SGLang --balance-rel-threshold
    cache_threshold: float = 0.5  # SGLang --cache-threshold

    def checked(self) -> RouterSettings:
        """Itself, or a ServingReplayError naming the bad setting and its range."""
        if not (np.isfinite(self.ttl_s) and self.ttl_s > 0):
            raise ServingReplayError(f"--router-ttl {self.ttl_s}: must be a positive duration (120s)")
        if not (np.isfinite(self.load_window_s) and self.load_window_s > 0):
            raise ServingReplayError(f"--load-window {self.load_window_s}: must be a positive duration (60s)")
        if self.balance_abs < 0:
            raise ServingReplayError(f"--balance-abs {self.balance_abs}: must be 0 or more requests (32)")
        if not (np.isfinite(self.balance_rel) and self.balance_rel >= 1):
            raise ServingReplayError(f"--balance-rel {self.balance_rel}: must be 1 or more (1.0001)")
        if not 0 <= self.cache_threshold < 1:
            raise ServingReplayError(f"--cache-threshold {self.cache_threshold}: must be in [0, 1) (0.5)")
        return self

    def as_dict(self) -> dict:
        return {"ttl_s": self.ttl_s, "load_window_s": self.load_window_s, "balance_abs": self.balance_abs,
                "balance_rel": self.balance_rel, "cache_threshold": self.cache_threshold}


@dataclass(frozen=True)
class Routes:
    instance: np.ndarray  # int32[n]: the instance each request was sent to
    matched_tokens: np.ndarray  # int64[n]: prompt tokens the chosen instance's router index matched
    reason: np.ndarray  # int8[n]: REASONS index
    n_instances: int
    routing: str


def check_routing(instances, routing: str) -> str:
    """`routing` normalised; a ServingReplayError naming the fix for anything else."""
    if isinstance(instances, bool) or not isinstance(instances, (int, np.integer)) or instances < 1:
        raise ServingReplayError(f"--instances {instances}: needs at least one instance (--instances 4)")
    name = str(routing).strip().lower().replace("_", "-")
    if name == "roundrobin":
        name = "round-robin"
    if name not in ROUTINGS:
        raise ServingReplayError(f"--routing {routing!r} is not a routing; choose round-robin or prefix")
    return name


@njit(cache=True, inline="always")
def _match(last, k, block, tokens, lo, hi, since):
    """Prompt tokens of the longest prefix of block[lo:hi] that instance k's index holds (sent since `since`)."""
    m = 0
    for j in range(lo, hi):
        if last[k, block[j]] < since:
            break
        m += tokens[j]
    return m


@njit(cache=True)
def _route(mode, n_inst, block, tokens, req_off, prompt, arrival, n_blocks, ttl, window, bal_abs, bal_rel,
           cache_thr, inst, matched, reason):
    n = arrival.shape[0]
    last = np.full((n_inst, max(n_blocks, 1)), -np.inf)
    load = np.zeros(n_inst, dtype=np.int64)
    head = 0  # oldest routed request still inside the load window
    for r in range(n):
        t = arrival[r]
        lo, hi = req_off[r], req_off[r + 1]
        while head < r and arrival[head] <= t - window:
            load[inst[head]] -= 1
            head += 1
        if mode == ROUND_ROBIN:
            i = r % n_inst
            why = R_ROTATION
        else:
            least = 0
            mx = load[0]
            for k in range(1, n_inst):
                if load[k] < load[least]:
                    least = k
                mx = max(mx, load[k])
            best = 0
            best_m = -1
            for k in range(n_inst):
                mk = _match(last, k, block, tokens, lo, hi, t - ttl)
                if mk > best_m or (mk == best_m and load[k] < load[best]):
                    best = k
                    best_m = mk
            if mx - load[least] > bal_abs and mx > bal_rel * load[least]:
                i = least
                why = R_BALANCE
            elif prompt[r] > 0 and best_m > cache_thr * prompt[r]:
                i = best
                why = R_CACHE
            else:
                i = least
                why = R_LEAST_LOADED
        inst[r] = i
        matched[r] = _match(last, i, block, tokens, lo, hi, t - ttl)
        reason[r] = why
        load[i] += 1
        for j in range(lo, hi):
            last[i, block[j]] = t


def route(trace, n_instances: int, routing: str = "round-robin", rate_scale: float = 1.0,
          settings: RouterSettings | None = None, arrival=None) -> Routes:
    """Assign each request of `trace` to one of `n_instances` (module docstring, pass 1)."""
    routing = check_routing(n_instances, routing)
    s = (settings or RouterSettings()).checked()
    n = trace.n_requests
    need = int(n_instances) * max(int(trace.n_blocks), 1) * 8
    if need > MAX_INDEX_BYTES:
        raise ServingReplayError(f"--instances {n_instances}: the router's index of {trace.n_blocks:,} trace blocks "
                                 f"per instance would take {need / 2**30:.1f} GiB; use at most "
                                 f"{MAX_INDEX_BYTES // (max(int(trace.n_blocks), 1) * 8):,} instances")
    req_off = np.ascontiguousarray(trace.request_offsets)
    tokens = np.ascontiguousarray(trace.tokens, dtype=np.int64)
    if arrival is None:
        time = np.asarray(trace.time, dtype=np.float64)
        arrival = time[np.minimum(req_off[:-1], max(len(time) - 1, 0))] / rate_scale if n else np.zeros(0)
    prompt = np.add.reduceat(tokens, req_off[:-1]) if n and len(tokens) else np.zeros(n, dtype=np.int64)
    inst = np.zeros(n, dtype=np.int32)
    matched = np.zeros(n, dtype=np.int64)
    reason = np.zeros(n, dtype=np.int8)
    _route(ROUND_ROBIN if routing == "round-robin" else PREFIX, int(n_instances),
           np.ascontiguousarray(trace.block, dtype=np.int32), tokens, req_off,
           np.ascontiguousarray(prompt, dtype=np.int64), np.ascontiguousarray(arrival, dtype=np.float64),
           int(trace.n_blocks), float(s.ttl_s), float(s.load_window_s), int(s.balance_abs), float(s.balance_rel),
           float(s.cache_threshold), inst, matched, reason)
    return Routes(instance=inst, matched_tokens=matched, reason=reason, n_instances=int(n_instances),
                  routing=routing)


def subset(rb: Reblocked, requests: np.ndarray) -> Reblocked:
    """The requests `requests` (ascending indices) of `rb` as a Reblocked of their own, ids
    renumbered densely as reblock numbers them (shared ids first, in order of first appearance;
    private ids after, in request order), so all requests give back `rb` itself."""
    requests = np.asarray(requests, dtype=np.int64)
    starts, ends = rb.offsets[requests], rb.offsets[requests + 1]
    lens = ends - starts
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    pos = np.repeat(starts - offsets[:-1], lens) + np.arange(int(offsets[-1]))
    old = rb.ids[pos]
    n_full = rb.n_full[requests]
    shared = old < rb.n_shared
    uniq, first = np.unique(old[shared], return_index=True)
    order = np.argsort(first, kind="stable")  # first appearance
    new_of = np.empty(len(uniq), dtype=np.int32)
    new_of[order] = np.arange(len(uniq), dtype=np.int32)
    ids = np.empty(len(old), dtype=np.int32)
    ids[shared] = new_of[np.searchsorted(uniq, old[shared])]
    n_shared = len(uniq)
    ids[~shared] = n_shared + np.arange(int((~shared).sum()), dtype=np.int32)
    r_starts, r_ends = rb.ref_offsets[requests], rb.ref_offsets[requests + 1]
    r_lens = r_ends - r_starts
    ref_offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    np.cumsum(r_lens, out=ref_offsets[1:])
    r_pos = np.repeat(r_starts - ref_offsets[:-1], r_lens) + np.arange(int(ref_offsets[-1]))
    return replace(rb, offsets=offsets, ids=ids, n_full=np.ascontiguousarray(n_full),
                   prompt_tokens=np.ascontiguousarray(rb.prompt_tokens[requests]),
                   output_tokens=np.ascontiguousarray(rb.output_tokens[requests]),
                   arrival=np.ascontiguousarray(rb.arrival[requests]), n_shared=int(n_shared),
                   n_ids=int(len(ids) and ids.max() + 1), ref_ids=np.ascontiguousarray(rb.ref_ids[r_pos]),
                   ref_offsets=ref_offsets)


def run_routed(trace, policy: str, capacity: int, instances: int, routing: str = "round-robin", config=None, *,
               reblocked: Reblocked | None = None, settings: RouterSettings | None = None, log_evictions: bool = False,
               **replay_settings):
    """Route `trace` to `instances` instances and replay each as `config` (a ReplayConfig;
    keyword `replay_settings` named as its fields laid over it; module docstring). Returns
    (routes, [ReplayResult per instance, None where an instance got no request])."""
    from .config import ReplayConfig
    from .reblock import reblock
    from .scheduler import run_replay

    cfg = ReplayConfig.of(config, **replay_settings)
    routing = check_routing(instances, routing)
    rate_scale = cfg.rate_scale
    rb = reblocked if reblocked is not None else reblock(trace, cfg.block_tokens)
    routes = route(trace, instances, routing, rate_scale, settings, arrival=rb.arrival / rate_scale)
    out = []
    for i in range(instances):
        idx = np.flatnonzero(routes.instance == i)
        if len(idx) == 0:
            out.append(None)
            continue
        sub = subset(rb, idx)
        with np.errstate(over="ignore"):  # the step model mixes the seed by a wrapping uint64 multiply
            res = run_replay(None, policy, capacity, ReplayConfig.of(cfg, seed=cfg.seed + i), reblocked=sub,
                             log_evictions=log_evictions)
        res.extra["requests_index"] = idx
        out.append(res)
    return routes, out


def aggregate_row(routes: Routes, results: list, policy: str, capacity: int) -> dict:
    """The aggregate over instances (module docstring)."""
    from .scheduler import DONE, ST_HIT_TOKENS, ST_PROMPT_TOKENS, ST_TOKENS

    live = [r for r in results if r is not None]
    done = [r.status == DONE for r in live]

    def cat(f):
        return np.concatenate([f(r)[d] for r, d in zip(live, done)]) if live else np.zeros(0)

    ttft = cat(lambda r: r.t_first - r.arrival)
    e2e = cat(lambda r: r.t_done - r.arrival)
    wait = cat(lambda r: r.t_sched - r.arrival)
    outs = cat(lambda r: r.output_tokens)
    first = cat(lambda r: r.t_first)
    fin = cat(lambda r: r.t_done)
    tpot = np.where(outs > 1, (fin - first) / np.maximum(outs - 1, 1), np.nan)

    def q(a, p):
        a = a[np.isfinite(a)]
        return float(np.percentile(a, p)) * 1e3 if len(a) else float("nan")

    t0 = min((float(r.arrival.min()) for r in live if len(r.arrival)), default=0.0)
    span = max((float(r.end_s) for r in live), default=0.0) - t0
    per = np.bincount(routes.instance, minlength=routes.n_instances)
    hit_blocks = sum(int(r.hit_blocks[d].sum()) for r, d in zip(live, done))
    full_blocks = sum(int(r.n_full[d].sum()) for r, d in zip(live, done))
    rows = [r.summary() for r in live]
    n_done = int(sum(int(d.sum()) for d in done))
    reasons = np.bincount(routes.reason, minlength=len(REASONS))
    prompt_tok = sum(int(r.stats[ST_PROMPT_TOKENS]) for r in live)
    return {
        "engine": live[0].engine if live else "", "policy": policy, "capacity": int(capacity),
        "instance": None, "instances": routes.n_instances, "routing": routes.routing,
        "requests": int(len(routes.instance)), "completed": n_done,
        "rejected": sum(x["rejected"] for x in rows),
        "ttft_p50_ms": q(ttft, 50), "ttft_p95_ms": q(ttft, 95), "ttft_p99_ms": q(ttft, 99),
        "tpot_p50_ms": q(tpot, 50), "tpot_p95_ms": q(tpot, 95), "tpot_p99_ms": q(tpot, 99),
        "e2e_p50_ms": q(e2e, 50), "e2e_p95_ms": q(e2e, 95), "e2e_p99_ms": q(e2e, 99),
        "queue_wait_p50_ms": q(wait, 50), "queue_wait_p99_ms": q(wait, 99),
        "tokens_per_s": sum(int(r.stats[ST_TOKENS]) for r in live) / span if span > 0 else float("nan"),
        "output_tokens_per_s": float(outs.sum()) / span if span > 0 else float("nan"),
        "requests_per_s": n_done / span if span > 0 else float("nan"),
        "block_hit_ratio": float(hit_blocks / max(full_blocks, 1)),
        "prefix_hit_ratio": float(sum(int(r.stats[ST_HIT_TOKENS]) for r in live) / max(prompt_tok, 1)),
        "router_match_ratio": float(routes.matched_tokens.sum() / max(prompt_tok, 1)),
        "preemptions": sum(x["preemptions"] for x in rows), "evictions": sum(x["evictions"] for x in rows),
        "peak_pinned_blocks": max((x["peak_pinned_blocks"] for x in rows), default=0),
        "simulated_s": span, "seconds": sum(x["seconds"] for x in rows),
        "requests_per_instance": [int(v) for v in per],
        "imbalance": float(per.max() / per.mean()) if per.sum() else float("nan"),
        "route_reasons": {name: int(v) for name, v in zip(REASONS, reasons)},
        "warnings": [f"instance {i}: {w}" for i, x in enumerate(rows) for w in x["warnings"]],
    }


def routed_document(trace, path, fmt, config=None, **settings) -> dict:
    """`policy replay --instances N`'s document: per-instance `replay` rows and the `routing`
    object with one aggregate row per (policy, capacity) (docs/policy-results.md), as `config`
    (a ReplayConfig with `instances`, `routing` and `router`; keyword `settings` named as its
    fields laid over it)."""
    from .config import ReplayConfig
    from .memory import resolve_pool
    from .reblock import reblock
    from .saturation import merged
    from .scheduler import replay_row
    from .summary import _policies, engine_document, sits_options

    cfg = ReplayConfig.of(config, **settings)
    instances = cfg.instances
    routing = check_routing(instances, cfg.routing or "round-robin")
    s = (cfg.router or RouterSettings()).checked()
    names = _policies(cfg.policies)
    sits_options(names, cfg.window_s, cfg.threshold, cfg.sits)  # given without -p sits: refused
    rb = reblock(trace, cfg.block_tokens)
    caps, plan, oversized = resolve_pool(cfg, rb.n_ids)  # per instance: each replica its own GPUs
    plain = ReplayConfig.of(cfg, window_s=None, threshold=False, sits=None)
    rows, agg = [], []
    for policy in names:
        run_cfg = cfg if policy == "sits" else plain
        for cap in caps:
            routes, results = run_routed(trace, policy, cap, instances, routing, run_cfg, reblocked=rb, settings=s)
            for i, res in enumerate(results):
                if res is None:
                    continue
                row = replay_row(res)
                row.update(instance=i, instances=int(instances), routing=routing)
                rows.append(row)
            agg.append(aggregate_row(routes, results, policy, cap))
            agg[-1].update(merged([r for r in rows if r["policy"] == policy and r["capacity"] == cap]))
            if cap in oversized:
                agg[-1]["warnings"].append(f"larger than the GPU holds (--allow-oversized-pool): {oversized[cap]}")
    return engine_document(trace, path, fmt, rb, rows, cfg, plan,
                           routing={"routing": routing, "instances": int(instances), **s.as_dict(),
                                    "aggregate": agg})


def routed_table(doc: dict):
    """The aggregate rows, then every instance's, as one table."""
    from rich.table import Table

    from .tables import ms as _s  # latencies in ms, as every table, the JSON and the report

    t, e, ro = doc["trace"], doc["engine"], doc["routing"]
    table = Table(title=(f"{t.get('path') or ''}: {t['requests']:,} requests over {ro['instances']} instances "
                         f"({ro['routing']} routing), {e['engine']} rules, {e['block_tokens']}-token blocks, "
                         f"arrival rate x{e['rate_scale']:g}"))
    for name in ("policy", "pool", "inst", "reqs", "TTFT p50 ms", "TTFT p99 ms", "queue p99 ms", "total tok/s",
                 "block hit", "prefix hit", "preempt", "imbal"):
        table.add_column(name, justify="left" if name == "policy" else "right", no_wrap=name != "policy")
    for a in ro["aggregate"]:
        table.add_row(a["policy"], f"{a['capacity']:,}", "all", f"{a['requests']:,}", _s(a["ttft_p50_ms"]),
                      _s(a["ttft_p99_ms"]), _s(a["queue_wait_p99_ms"]), f"{a['tokens_per_s']:,.0f}",
                      f"{a['block_hit_ratio']:.4f}", f"{a['prefix_hit_ratio']:.4f}", f"{a['preemptions']:,}",
                      f"{a['imbalance']:.2f}")
        for r in doc["replay"]:
            if r["policy"] == a["policy"] and r["capacity"] == a["capacity"]:
                table.add_row("", "", str(r["instance"]), f"{r['requests']:,}", _s(r["ttft_p50_ms"]),
                              _s(r["ttft_p99_ms"]), _s(r["queue_wait_p99_ms"]), f"{r['tokens_per_s']:,.0f}",
                              f"{r['block_hit_ratio']:.4f}", f"{r['prefix_hit_ratio']:.4f}",
                              f"{r['preemptions']:,}", "")
    table.caption = ("aggregate: quantiles over every request, tokens/s over the common span, hit ratios pooled; "
                     "imbalance = busiest instance's requests / mean; route reasons: "
                     + "; ".join(f"{a['policy']}@{a['capacity']:,}: "
                                 + ", ".join(f"{k} {v:,}" for k, v in a["route_reasons"].items() if v)
                                 for a in ro["aggregate"]))
    return table
