"""`sitsprof policy replay`'s document and table: every (policy, capacity) replay of one trace.

The document is a policy-results document (policies/engine/results.py, docs/policy-results.md)
with an empty `results` and the `replay` list (one `scheduler.replay_row` per replay).
"""
from __future__ import annotations

from ..engine.capacity import parse_capacities
from ..engine.results import document, trace_summary
from .reblock import reblock
from .scheduler import DONE, SERIAL_RATE_SCALE, admission_rules, replay_row, run_replay
from .slo import offered_rate


def _policies(text: str) -> list[str]:
    from .names import serving_names

    return serving_names(text)


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
            rows[-1]["offered_requests_per_s"] = offered_rate(res.arrival)  # slo.py's saturation test
            rows[-1]["prompt_tokens_per_s"] = prompt_rate(res)
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


def prompt_rate(res) -> float:
    """Prompt tokens of the finished requests per simulated second (beside `output_tokens_per_s`;
    `tokens_per_s` is every token scheduled, recomputed ones included)."""
    done = res.status == DONE
    span = float(res.end_s - (res.arrival.min() if len(res.arrival) else 0.0))
    return float(res.prompt_tokens[done].sum()) / span if span > 0 else float("nan")


def replay_table(doc: dict):
    """The replay table (tables.py: the columns that fit 100 columns; the rest in --json)."""
    from .tables import replay_table as table

    return table(doc)
