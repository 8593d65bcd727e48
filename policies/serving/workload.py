"""Closed-loop workloads: N clients, each sending its next request the moment its last one ends.

This is how vLLM's ``benchmark_serving.py --max-concurrency N`` (and ``vllm bench serve``)
drives a server, and how the measured runs of NVIDIA's silicon table were taken: a semaphore
of N in front of the request stream, requests sent at an infinite rate, so a new request
starts exactly when one finishes. TTFT counts from that moment (the client's send), so a
request that waits for blocks or a free slot in the engine pays the wait in its TTFT.

The replay keeps its arrival array: a closed-loop request's arrival is +inf until the
scheduler, as some earlier request finishes (or is rejected), sets it to that step's end
(scheduler.py, `SI_ISSUE`). Requests are interchangeable in a synthetic workload (same ISL and
OSL), so "the next request of the client that just finished" is simply the next index.

Two sources:

* `synthetic(concurrency, isl, osl, requests, block_tokens)`: every request ISL random,
  unshared prompt tokens (each prompt block its own id: no prefix is ever reused, like the
  benchmark's random dataset) and OSL output tokens (``--ignore-eos``: exactly OSL).
* `closed_loop(reblocked, concurrency)`: a trace's requests in file order, in a closed loop
  (the trace's timestamps are dropped; its prompts and prefix sharing kept).

**Frontend delay** (`frontend_delay_s`, default 0): a served request reaches the engine's
waiting queue some time after its client sends it (HTTP, the API server's tokenization, the
hop to the engine core), and the engine only takes new requests between steps. With no delay
a request sent as another finishes joins the very next step, so clients that finish together
restart together and stay in lock step for the whole run; with any delay the request misses
the step that starts at that instant and waits for it, which spreads the clients out the way
a served benchmark sees. The delay is drawn per request, seeded, from an exponential of the
given mean (the scheduler adds it to the request's arrival: scheduler.py); TTFT still counts
from the send, so it includes the delay, as the client's clock does.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ServingReplayError
from ..traces.trace import Trace
from .reblock import Reblocked, reblock

__all__ = ["DEFAULT_ROUNDS", "check", "closed_loop", "synthetic", "synthetic_trace"]

#: requests per client when --requests is not given (the benchmark's run length is not in the
#: silicon table; 4 rounds put three quarters of the requests past the cold start)
DEFAULT_ROUNDS = 4


def check(concurrency: int, isl: int | None = None, osl: int | None = None, requests: int | None = None) -> None:
    """One line naming the bad option and its fix (ServingReplayError, exit 2)."""
    if concurrency is None or int(concurrency) < 1:
        raise ServingReplayError(f"--concurrency {concurrency}: needs at least one client (--concurrency 8)")
    for name, v in (("--isl", isl), ("--osl", osl), ("--requests", requests)):
        if v is not None and int(v) < 1:
            raise ServingReplayError(f"{name} {v}: must be at least 1")


def synthetic_trace(isl: int, osl: int, requests: int, block_tokens: int = 16) -> Trace:
    """`requests` prompts of `isl` tokens in `block_tokens`-token blocks, no block shared, each
    wanting `osl` output tokens; every timestamp 0 (closed_loop sets the arrivals)."""
    check(1, isl, osl, requests)
    per = -(-int(isl) // block_tokens)
    n = int(requests) * per
    block = np.arange(n, dtype=np.int32)
    tokens = np.full(n, block_tokens, dtype=np.int32)
    tail = int(isl) - (per - 1) * block_tokens
    tokens[per - 1:: per] = tail
    zeros = np.zeros(n)
    return Trace(time=zeros, request=np.repeat(np.arange(requests, dtype=np.int64), per), block=block,
                 original_id=block.astype(np.int64), position=np.tile(np.arange(per, dtype=np.int32), requests),
                 tokens=tokens, tenant=np.broadcast_to(np.int32(-1), (n,)),
                 request_output_tokens=np.full(int(requests), int(osl), dtype=np.int64),
                 source=f"closed loop: {requests} requests of {isl} random tokens in, {osl} out",
                 block_tokens=int(block_tokens), n_blocks=n)


def closed_loop(rb: Reblocked, concurrency: int) -> Reblocked:
    """`rb` with its first `concurrency` requests arriving at 0 and every later one issued when
    an earlier one ends (arrival +inf: scheduler.py sets it)."""
    check(concurrency)
    arrival = np.full(rb.n_requests, np.inf)
    arrival[: int(concurrency)] = 0.0
    return dataclasses.replace(rb, arrival=arrival)


def synthetic(concurrency: int, isl: int, osl: int, requests: int | None = None,
              block_tokens: int = 16, frontend_delay_s: float = 0.0, seed: int = 0) -> tuple[Trace, Reblocked]:
    """The synthetic closed loop (module docstring): its trace (for the document's header) and
    its re-blocked requests with closed-loop arrivals; `requests` defaults to DEFAULT_ROUNDS per
    client; `frontend_delay_s` > 0 gives each request a seeded exponential delay of that mean
    between its send and the engine (module docstring)."""
    check(concurrency, isl, osl, requests)
    requests = int(requests) if requests is not None else DEFAULT_ROUNDS * int(concurrency)
    trace = synthetic_trace(isl, osl, requests, block_tokens)
    rb = closed_loop(reblock(trace, block_tokens), concurrency)
    if frontend_delay_s < 0 or not np.isfinite(frontend_delay_s):
        raise ServingReplayError(f"frontend delay {frontend_delay_s!r} s: must be a non-negative number of seconds")
    if frontend_delay_s > 0:
        delay = np.random.default_rng(seed).exponential(float(frontend_delay_s), rb.n_requests)
        rb = dataclasses.replace(rb, frontend_delay=delay)
    return trace, rb
