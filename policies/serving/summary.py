"""`sitsprof policy replay`'s document and table: every (policy, capacity) replay of one trace.

The document is a policy-results document (policies/engine/results.py, docs/policy-results.md)
with an empty `results` and the `replay` list (one `scheduler.replay_row` per replay).
"""
from __future__ import annotations

from ..engine.capacity import parse_capacities
from ..engine.results import document, trace_summary
from .reblock import reblock
from .scheduler import SERIAL_RATE_SCALE, admission_rules, replay_row, run_replay


def _policies(text: str) -> list[str]:
    from .evictors import POLICY_IDS

    names = [p.strip().lower().replace("-", "").replace("_", "") for p in str(text).split(",") if p.strip()]
    if names == ["all"]:
        return list(POLICY_IDS)
    return names


def sits_options(names: list[str], window_s=None, threshold=False, sits=None) -> dict:
    """The options that drive -p sits only (`window_s`, `threshold`, `sits`: SitsConfig fields,
    threshold_*), those given, for run_replay / run_routed of sits; given without sits in
    `names`: `ServingReplayError`. `policy replay`'s one check, with or without --instances."""
    given = {k: v for k, v in (("window_s", window_s), ("threshold", threshold), ("sits", sits))
             if v is not None and v is not False and v != {}}  # window_s=0 is given (and refused later)
    if given and "sits" not in names:
        from ..errors import ServingReplayError

        flags = ", ".join({"window_s": "--window", "threshold": "--threshold", "sits": "the SITS options"}[k]
                          for k in given)
        raise ServingReplayError(f"{flags} drive -p sits only (not -p {','.join(names)}): add sits to -p")
    return given


def replay_document(trace, path, fmt, engine="vllm", policies="lru", capacities="10%", block_tokens=16,
                    rate_scale=1.0, max_num_batched_tokens=8192, max_num_seqs=256, calibration=None, model=None,
                    seed=0, window_s=None, threshold=False, sits=None, reblocked=None,
                    reserve_full_isl=True) -> dict:
    """`window_s`, `threshold` and `sits` (SitsConfig fields, threshold_*) drive -p sits only;
    `reblocked`: the trace already re-blocked (workload.py's closed loop sets its arrivals);
    `reserve_full_isl` is vLLM 0.33's admission gate (scheduler.run_replay)."""
    names = _policies(policies)
    sits_args = sits_options(names, window_s, threshold, sits)
    rb = reblocked if reblocked is not None else reblock(trace, block_tokens)
    caps = parse_capacities(capacities, rb.n_ids)
    rows = []
    for policy in names:
        adaptive = sits_args if policy == "sits" else {}
        for cap in caps:
            res = run_replay(trace, policy, cap, engine=engine, block_tokens=block_tokens, rate_scale=rate_scale,
                             max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                             calibration=calibration, model=model, seed=seed, reblocked=rb,
                             reserve_full_isl=reserve_full_isl, **adaptive)
            rows.append(replay_row(res))
    return engine_document(trace, path, fmt, rb, rows, engine=engine, block_tokens=block_tokens,
                           rate_scale=rate_scale, max_num_batched_tokens=max_num_batched_tokens,
                           max_num_seqs=max_num_seqs, reserve_full_isl=reserve_full_isl)


def engine_document(trace, path, fmt, rb, rows, *, engine, block_tokens, rate_scale, max_num_batched_tokens,
                    max_num_seqs, reserve_full_isl=True, **fields) -> dict:
    """The policy-results document of serving replays `rows` of `trace` (re-blocked `rb`), with
    `fields` (routing.py's `routing`) beside `trace`, `engine` and `replay`."""
    summary = trace_summary(trace, path, fmt)
    summary["kv_block_tokens"] = int(block_tokens)
    summary["kv_blocks"] = int(rb.n_ids)
    summary["shared_kv_blocks"] = int(rb.n_shared)
    return document([], trace=summary, replay=rows,
                    engine={"engine": engine, "block_tokens": int(block_tokens), "rate_scale": float(rate_scale),
                            "max_num_batched_tokens": int(max_num_batched_tokens),
                            "max_num_seqs": int(max_num_seqs),
                            **admission_rules(reserve_full_isl, rate_scale <= SERIAL_RATE_SCALE)}, **fields)


def _s(v) -> str:
    """ms -> seconds, 3 significant decimals."""
    if v is None or v != v:
        return "-"
    return f"{v / 1e3:,.3f}"


def replay_table(doc: dict):
    from rich.table import Table

    t = doc["trace"]
    e = doc["engine"]
    title = (f"{t.get('path') or ''}: {t['requests']:,} requests, {e['engine']} rules, "
             f"{e['block_tokens']}-token blocks ({t['kv_blocks']:,} in the trace), arrival rate x{e['rate_scale']:g}")
    table = Table(title=title)
    for name in ("policy", "pool blocks", "TTFT P50 s", "TTFT P99 s", "TPOT P50 s", "queue P99 s", "tok/s",
                 "block hit", "prefix hit", "preempt", "peak pinned", "rejected"):
        table.add_column(name, justify="left" if name == "policy" else "right", no_wrap=name != "policy")
    for r in doc["replay"]:
        table.add_row(r["policy"], f"{r['capacity']:,}", _s(r["ttft_p50_ms"]), _s(r["ttft_p99_ms"]),
                      _s(r["tpot_p50_ms"]), _s(r["queue_wait_p99_ms"]), f"{r['tokens_per_s']:,.0f}",
                      f"{r['block_hit_ratio']:.4f}", f"{r['prefix_hit_ratio']:.4f}", f"{r['preemptions']:,}",
                      f"{r['peak_pinned_blocks']:,}", f"{r['rejected']:,}")
    if doc["replay"]:
        shares = doc["replay"][0]["term_share"]
        table.caption = (f"step time: {doc['replay'][0]['latency_model']}; share of the summed terms: "
                         + ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items()))
        lines = [sits_line(r) for r in doc["replay"] if r.get("sits")]
        if lines:
            table.caption += "\n" + "\n".join(lines)
    return table


def sits_line(row: dict) -> str:
    """One line on a sits replay's controller: windows, switches, behaviour shares, the threshold engine."""
    x = row["sits"]
    share = ", ".join(f"{k} {100 * v:.0f}%" for k, v in x["behaviour_share"].items())
    text = (f"sits at {row['capacity']:,}: {x['decided_windows']:,} decisions in {x['window_s']:g} s windows, "
            f"{x['switches']} behaviour switches; served {share}")
    th = x.get("threshold")
    if th is not None:
        sw = [e for e in x["events"] if e["event"] == "switch"]
        done = f"switched LIRS->SITS at t={sw[0]['time']:.1f} s" if sw else "no switch"
        text += f"; threshold engine: {done}, {th['rollbacks']} rollbacks"
    return text
