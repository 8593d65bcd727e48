"""`sitsprof policy replay`'s document and table: every (policy, capacity) replay of one trace.

The document is a policy-results document (policies/engine/results.py, docs/policy-results.md)
with an empty `results` and the `replay` list (one `scheduler.replay_row` per replay).
"""
from __future__ import annotations

import numpy as np

from ..engine.results import document, trace_summary
from .memory import pool_fields, resolve_pool
from .reblock import reblock
from .scheduler import DONE, SERIAL_RATE_SCALE, admission_rules, replay_row, run_replay
from .slo import offered_rate

__all__ = ["engine_document", "prompt_rate", "replay_document", "replay_table", "sits_options"]


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


def replay_document(trace, path, fmt, config=None, *, reblocked=None, **settings) -> dict:
    """The document of every (policy, capacity) replay of `trace` as `config` (a ReplayConfig;
    keyword `settings` named as its fields laid over it). `window_s`, `threshold` and `sits`
    (SitsConfig fields, threshold_*) drive -p sits only; `reblocked`: the trace already
    re-blocked (workload.py's closed loop sets its arrivals); `config.reserve_full_isl` is vLLM
    0.33's admission gate (scheduler.run_replay)."""
    from .config import ReplayConfig

    cfg = ReplayConfig.of(config, **settings)
    names = _policies(cfg.policies)
    sits_options(names, cfg.window_s, cfg.threshold, cfg.sits)  # given without -p sits: refused
    rb = reblocked if reblocked is not None else reblock(trace, cfg.block_tokens)
    caps, plan, oversized = resolve_pool(cfg, rb.n_ids)
    plain = ReplayConfig.of(cfg, window_s=None, threshold=False, sits=None)
    closed_loop = bool(np.isinf(rb.arrival).any())  # workload.py's closed loop: no arrival rate to keep up with
    rows = []
    for policy in names:
        run_cfg = cfg if policy == "sits" else plain
        for cap in caps:
            res = run_replay(trace, policy, cap, run_cfg, reblocked=rb)
            res.extra["closed_loop"] = closed_loop
            rows.append(replay_row(res))
            rows[-1]["offered_requests_per_s"] = offered_rate(res.arrival)  # slo.py's saturation test
            rows[-1]["prompt_tokens_per_s"] = prompt_rate(res)
            if cap in oversized:
                rows[-1]["warnings"].append(f"larger than the GPU holds (--allow-oversized-pool): {oversized[cap]}")
    return engine_document(trace, path, fmt, rb, rows, cfg, plan)


def engine_document(trace, path, fmt, rb, rows, config, plan=None, **fields) -> dict:
    """The policy-results document of serving replays `rows` of `trace` (re-blocked `rb`) as
    `config` (a ReplayConfig; `plan` its memory.MemoryPlan), with `fields` (routing.py's
    `routing`) beside `trace`, `engine` and `replay`."""
    summary = trace_summary(trace, path, fmt)
    summary["kv_block_tokens"] = int(config.block_tokens)
    summary["kv_blocks"] = int(rb.n_ids)
    summary["shared_kv_blocks"] = int(rb.n_shared)
    serial = config.serial if config.serial is not None else config.rate_scale <= SERIAL_RATE_SCALE
    engine = {**config.engine_fields(), **admission_rules(config.reserve_full_isl, serial, config.prefill_first),
              "pool": pool_fields(plan, config.capacities is not None)}
    return document([], trace=summary, replay=rows, engine=engine, **fields)


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
