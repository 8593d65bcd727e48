"""The request JSONL format (defined here) with the block ids to replay; tenant = model stack.

One JSON object a line: `model_stack`, `input_tokens`, `max_new_tokens` (and `request_id`,
`priority_class`), plus the block ids to replay, `hash_ids`, and optionally `arrival_ms`,
`output_tokens` and `prompt`, the request's prompt text (a string; what `sitsprof policy
generate --as requests` writes; semantic-shard clusters it, `Trace.request_texts`). A `.jsonl` file
whose first object has `model_stack` is read as this format (`detect.py`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .ids import trace_from_requests
from .lines import BadLines, count_problem, hash_ids_problem, jsonl_rows, shown, with_skips
from .timing import stamp_problem, stamp_seconds
from .trace import DEFAULT_BLOCK_TOKENS, Trace

__all__ = ["read_requests"]

_REQUEST_HASH_FIX = (
    "the request format needs block ids to be replayed; `sitsprof policy generate --as requests` writes them"
)


def _request_problem(row) -> str | None:
    """Why a parsed request JSONL line is unusable, or None when it is fine."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    for name in ("model_stack", "input_tokens", "max_new_tokens"):
        if name not in row:
            return f"missing field {name!r}"
    if "hash_ids" not in row:
        return f"missing field 'hash_ids' ({_REQUEST_HASH_FIX})"
    if not isinstance(row["model_stack"], str) or not row["model_stack"]:
        return f"model_stack must be a non-empty string, got {shown(row['model_stack'])}"
    for name in ("input_tokens", "max_new_tokens", "output_tokens", "arrival_ms"):
        if name in row:
            problem = (stamp_problem if name == "arrival_ms" else count_problem)(name, row[name])
            if problem is not None:
                return problem
    if "prompt" in row and not isinstance(row["prompt"], str):
        return f"prompt must be a string (the request's prompt text), got {shown(row['prompt'])}"
    return hash_ids_problem(row["hash_ids"])


def read_requests(path, skip_bad_lines: bool = False, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                  time_unit: str | None = None) -> Trace:
    """Read request JSONL carrying `hash_ids`; tenant = model stack."""
    import pandas as pd

    path = Path(path)
    bad = BadLines(path, skip_bad_lines)
    stamps: list = []
    inputs: list[int] = []
    outputs: list[int] = []
    stacks: list[str] = []
    id_lists: list[list[int]] = []
    prompts: list[str | None] = []
    for row in jsonl_rows(path, bad, _request_problem):
        stamps.append(row.get("arrival_ms", 0))
        inputs.append(row["input_tokens"])
        outputs.append(row.get("output_tokens", -1))
        stacks.append(row["model_stack"])
        id_lists.append(row["hash_ids"])
        prompts.append(row.get("prompt"))
    if not id_lists:
        raise bad.empty("requests")
    codes, names = pd.factorize(np.asarray(stacks, dtype=object), sort=False)
    trace = trace_from_requests(
        id_lists, None, inputs, outputs, tenant=codes, tenant_names=tuple(str(n) for n in names),
        source=str(path), block_tokens=block_tokens, arrival_s=stamp_seconds(stamps, "ms", time_unit),
    )
    if any(p is not None for p in prompts):
        trace = dataclasses.replace(trace, request_texts=tuple(prompts))
    return with_skips(trace, bad) if bad.count else trace
