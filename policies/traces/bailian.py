"""Alibaba Bailian (Qwen) KV-cache traces: JSONL, one request a line, 16-token blocks.

The format of the traces published with "KVCache Cache in the Wild: Characterizing and
Optimizing KVCache Cache at a Large Cloud Provider" (Wang et al., USENIX ATC '25,
arXiv 2506.02634), repository alibaba-edu/qwen-bailian-usagetraces-anon (Apache-2.0; files
`qwen_traceA_blksz_16.jsonl`, `qwen_traceB_blksz_16.jsonl`, `qwen_coder_blksz_16.jsonl`,
`qwen_thinking_blksz_16.jsonl`), whose README gives each record as:

    chat_id         int    randomized chat identifier (sequential integers)
    parent_chat_id  int    the chat this turn continues, -1 for a root request
    timestamp       float  seconds since the trace's start (e.g. 61.114)
    input_length    int    input tokens
    output_length   int    output tokens
    type            str    request type: text, search, image, file
    turn            int    conversation turn number
    hash_ids        [int]  one id per 16-token block (salted SipHash-2-4, remapped to
                           sequential integers), prefix order

Each line is one request, its blocks its references, in order; every block carries 16
tokens (`block_tokens`, `--block-tokens` for another size) except the last, which carries
`input_length - 16*(n-1)` clamped to [1, 16]. The tenant is unknown (-1): every trace is
one model instance's, and `type` is a request category, not a tenant (cross-tenant figures
such as CTCCI would be wrong on it), so it is checked but not kept. A `.jsonl` file
whose first object has `chat_id`, `parent_chat_id` or `turn` is read as this format
(`detect.py`). Timestamps are seconds, as the format says (a string of digits is
nanoseconds; `--time-unit` overrides both, `timing.py`). Ids are 0 and up, up to 2**64 - 1.
"""
from __future__ import annotations

from .lines import count_problem, hash_ids_problem, is_int, shown
from .mooncake import read_request_lines
from .timing import stamp_problem
from .trace import Trace

__all__ = ["BAILIAN_BLOCK_TOKENS", "MARKER_FIELDS", "NAME", "read_bailian"]

NAME = "bailian"
#: The block size of the published traces (`_blksz_16` in their file names).
BAILIAN_BLOCK_TOKENS = 16
#: Fields whose presence in the first object marks the format (Mooncake has none of them).
MARKER_FIELDS = ("chat_id", "parent_chat_id", "turn")
_REQUIRED = ("timestamp", "input_length", "output_length", "hash_ids")


def _bailian_problem(row) -> str | None:
    """Why a parsed Bailian line is unusable, or None when it is fine."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    for name in _REQUIRED:
        if name not in row:
            return f"missing field {name!r}"
    problem = stamp_problem("timestamp", row["timestamp"])
    for name in ("input_length", "output_length", "chat_id", "turn"):
        if problem is None and name in row:
            problem = count_problem(name, row[name], "an integer")
    if problem is not None:
        return problem
    if "parent_chat_id" in row:
        parent = row["parent_chat_id"]
        if not is_int(parent) or not -1 <= parent < 2**63:
            return f"parent_chat_id must be a chat id or -1 (a root request), got {shown(parent)}"
    if "type" in row and not isinstance(row["type"], str):
        return f"type must be a string (text, search, image, file), got {shown(row['type'])}"
    return hash_ids_problem(row["hash_ids"], signed=False)


def read_bailian(path, skip_bad_lines: bool = False, block_tokens: int = BAILIAN_BLOCK_TOKENS,
                 time_unit: str | None = None) -> Trace:
    """Read a Bailian (Qwen) JSONL trace: one request a line, one reference per hash id."""
    return read_request_lines(path, _bailian_problem, "s", skip_bad_lines, block_tokens, time_unit)
