"""Trace -> per-request fine KV blocks of `block_tokens` tokens (default 16).

A trace's hash ids cover `trace.block_tokens` tokens each (512 in Mooncake) and are prefix
hashes: an id names its block together with the whole prefix before it. Coarse id h at a
request's position j becomes ceil(tokens of that block / block_tokens) fine blocks (h, 0),
(h, 1), ...; (h, k) gets one dense int32 id, the same in every request that has h.

Assumption (also in the README): requests that share a coarse block share all of its
fine sub-blocks. That holds for prefix hashes, since the coarse hash covers the whole prefix
up to the end of the coarse block, so equal coarse ids mean equal tokens in every sub-block.

Only FULL fine blocks are shared: the partial last fine block of a prompt, and every block
the decode phase writes, is private to its request (an id no other request has), since its
tokens after the prompt are the request's own output. A request's block list is
[its full prompt blocks (shared ids)] + [its private blocks]; it needs
ceil((prompt + output - 1) / block_tokens) blocks at the end (the last output token's KV is
never written), and the private ones are numbered after every shared id.

`block_tokens` must divide the trace's block size (fine blocks never straddle a coarse
boundary); equal to it, fine == coarse.

Inputs the arrays cannot hold are refused in one line before the kernel runs (`_check_sizes`):
a reference carrying more tokens than its block holds (an oracleGeneral `obj_size` near 2^31
made the kernel write past its arrays: a segmentation fault), and a trace whose requests need
more KV blocks than int32 ids number (a Mooncake `output_length` of 2^62 ended in MemoryError).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sitsprof.common.jit import njit

from ..errors import ServingReplayError as ReblockError

__all__ = ["MAX_IDS", "Reblocked", "reblock"]

#: Ids are int32: every block of every request must be numbered below this.
MAX_IDS = 2**31 - 1


@dataclass(frozen=True)
class Reblocked:
    """Per-request fine blocks in CSR form, dense ids.

    offsets       int64[n+1]  request r's blocks are ids[offsets[r]:offsets[r+1]]
    ids           int32[...]  every block the request will hold (prompt then decode)
    n_full        int32[n]    the leading full prompt blocks (shared, cacheable on arrival)
    prompt_tokens int64[n]
    output_tokens int64[n]
    arrival       float64[n]  seconds (trace time, not yet divided by a rate scale)
    n_shared      int         shared ids are 0..n_shared-1; private ids follow
    n_ids         int         ids in all
    block_tokens  int
    ref_ids, ref_offsets      the trace's references re-blocked one for one (every fine block
                              of every prompt, the partial last one included, with the id the
                              whole-trace kernels would see): the no-concurrency check uses it
    frontend_delay float64[n] or None: seconds from a closed-loop request's send to its place in
                              the engine's waiting queue (workload.py); None: none
    """

    offsets: np.ndarray
    ids: np.ndarray
    n_full: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival: np.ndarray
    n_shared: int
    n_ids: int
    block_tokens: int
    ref_ids: np.ndarray
    ref_offsets: np.ndarray
    frontend_delay: np.ndarray | None = None

    @property
    def n_requests(self) -> int:
        return len(self.n_full)


@njit(cache=True)
def _fine_counts(tokens, bt):
    n_refs = 0
    for i in range(tokens.shape[0]):
        n_refs += (tokens[i] + bt - 1) // bt
    return n_refs


@njit(cache=True)
def _reblock(block, tokens, req_offsets, out_tokens, k_per, bt, n_coarse):
    n = req_offsets.shape[0] - 1
    n_refs = _fine_counts(tokens, bt)
    ref_key = np.empty(n_refs, dtype=np.int64)  # h * k_per + k
    ref_off = np.zeros(n + 1, dtype=np.int64)
    prompt = np.zeros(n, dtype=np.int64)
    full = np.zeros(n, dtype=np.int32)
    m = 0
    for r in range(n):
        p = 0
        for i in range(req_offsets[r], req_offsets[r + 1]):
            t = tokens[i]
            nk = (t + bt - 1) // bt
            for k in range(nk):
                ref_key[m] = np.int64(block[i]) * k_per + k
                m += 1
            p += t
        prompt[r] = p
        full[r] = p // bt  # fine blocks are full only while the coarse ones are (only the last is partial)
        ref_off[r + 1] = m
    # dense ids: direct map over the key space, numbered in order of first appearance
    space = np.int64(n_coarse) * k_per
    dense = np.full(max(space, 1), -1, dtype=np.int32)
    ref_ids = np.empty(n_refs, dtype=np.int32)
    nxt = 0
    for j in range(n_refs):
        key = ref_key[j]
        if dense[key] < 0:
            dense[key] = nxt
            nxt += 1
        ref_ids[j] = dense[key]
    # shared = ids of full fine blocks; renumber them first so private ids follow densely
    shared_map = np.full(max(nxt, 1), -1, dtype=np.int32)
    n_shared = 0
    for r in range(n):
        for q in range(full[r]):
            x = ref_ids[ref_off[r] + q]
            if shared_map[x] < 0:
                shared_map[x] = n_shared
                n_shared += 1
    offsets = np.zeros(n + 1, dtype=np.int64)
    for r in range(n):
        o = out_tokens[r]
        need = (prompt[r] + o - 1 + bt - 1) // bt
        if need < full[r]:
            need = full[r]
        offsets[r + 1] = offsets[r] + need
    ids = np.empty(offsets[n], dtype=np.int32)
    priv = n_shared
    for r in range(n):
        b0 = offsets[r]
        for q in range(full[r]):
            ids[b0 + q] = shared_map[ref_ids[ref_off[r] + q]]
        for q in range(full[r], offsets[r + 1] - b0):
            ids[b0 + q] = priv
            priv += 1
    return offsets, ids, full, prompt, ref_ids, ref_off, n_shared, priv


def reblock(trace, block_tokens: int = 16, default_output: int = 1) -> Reblocked:
    """Re-block `trace` to `block_tokens`-token blocks (module docstring)."""
    coarse = int(trace.block_tokens)
    if block_tokens < 1 or coarse % block_tokens:
        raise ReblockError(
            f"--block-tokens {block_tokens} does not divide the trace's {coarse}-token blocks "
            f"(pick a divisor of {coarse}, such as 16)")
    n = trace.n_requests
    req_offsets = np.ascontiguousarray(trace.request_offsets)
    tokens = np.ascontiguousarray(trace.tokens, dtype=np.int64)
    out = trace.request_output_tokens
    if out is None:
        out = np.full(n, default_output, dtype=np.int64)
    out = np.where(np.asarray(out) < 1, default_output, out).astype(np.int64)
    first = req_offsets[:-1]
    time = np.asarray(trace.time, dtype=np.float64)
    arrival = time[np.minimum(first, max(len(time) - 1, 0))] if len(time) else np.zeros(0)
    _check_sizes(tokens, req_offsets, out, coarse, block_tokens)
    try:
        offsets, ids, full, prompt, ref_ids, ref_off, n_shared, n_ids = _reblock(
            np.ascontiguousarray(trace.block, dtype=np.int32), tokens, req_offsets, out,
            np.int64(coarse // block_tokens), np.int64(block_tokens), np.int64(trace.n_blocks))
    except MemoryError:
        raise ReblockError(f"the trace's {n:,} requests need more memory for their KV blocks than this machine "
                           f"has (at {block_tokens} tokens a block); replay a part of it, or raise "
                           "--block-tokens") from None
    return Reblocked(offsets=offsets, ids=ids, n_full=full, prompt_tokens=prompt, output_tokens=out,
                     arrival=np.ascontiguousarray(arrival), n_shared=int(n_shared), n_ids=int(n_ids),
                     block_tokens=int(block_tokens), ref_ids=ref_ids, ref_offsets=ref_off)


def _check_sizes(tokens, req_offsets, out, coarse: int, block_tokens: int) -> None:
    """Refuse, naming the first offender, what `_reblock`'s arrays cannot hold (module docstring).
    Sums are taken in float64: an int64 sum of such sizes would wrap around instead."""
    if len(tokens) and int(tokens.max()) > coarse:
        i = int(np.argmax(tokens > coarse))
        request = int(np.searchsorted(req_offsets, i, side="right")) - 1
        raise ReblockError(
            f"request {request} (reference {i}) carries {int(tokens[i]):,}"
            f"{' or more' if int(tokens[i]) >= 2**31 - 1 else ''} tokens in one {coarse}-token block: "  # int32-clipped
            f"a block holds at most {coarse} (an oracleGeneral obj_size is the reference's tokens); "
            "fix or drop those records")
    if not len(out):
        return
    ends = np.asarray(req_offsets[1:], dtype=np.int64)
    starts = np.asarray(req_offsets[:-1], dtype=np.int64)
    cum = np.concatenate(([0.0], np.cumsum(tokens, dtype=np.float64)))
    prompt = cum[ends] - cum[starts]
    need = np.ceil((prompt + out.astype(np.float64) - 1) / block_tokens)
    refs = float(np.ceil(tokens / block_tokens).sum()) if len(tokens) else 0.0
    if need.sum() + refs < MAX_IDS:
        return
    r = int(np.argmax(need))
    raise ReblockError(
        f"the trace's requests need {need.sum() + refs:,.0f} KV blocks of {block_tokens} tokens, more than the "
        f"replay can number ({MAX_IDS:,}); the largest, request {r}, has {int(prompt[r]):,} prompt and "
        f"{int(out[r]):,} output tokens: check its output_length, or replay a part of the trace")
