"""`sitsprof policy replay --concurrency N` (a closed-loop workload) and `sitsprof policy validate`.

Wiring only: the workload is `sitsprof.policies.serving.workload`, the silicon table
`...serving.silicon`, the validation `...serving.validate`.
"""
from __future__ import annotations

from .console import load_trace


def closed_loop_source(trace_path, fmt, skip_bad_lines, concurrency, isl, osl, requests, block_tokens, instances):
    """(trace, reblocked, path, fmt) of `policy replay`'s closed loop: the synthetic ISL/OSL
    source without TRACE, else TRACE's requests in file order; a bad combination is one line."""
    from sitsprof.policies.errors import ServingReplayError
    from sitsprof.policies.serving import workload

    if concurrency is None:
        raise ServingReplayError("--isl, --osl and --requests shape a closed-loop workload: add --concurrency N")
    if instances is not None:
        raise ServingReplayError("--concurrency drives one engine; drop --instances (or replay a trace's arrivals)")
    if trace_path is None:
        if isl is None or osl is None:
            raise ServingReplayError("--concurrency without a TRACE replays a synthetic workload: give --isl and "
                                     "--osl (--isl 1024 --osl 128)")
        trace, rb = workload.synthetic(concurrency, isl, osl, requests, block_tokens)
        return trace, rb, "closed-loop", "synthetic"
    if isl is not None or osl is not None:
        raise ServingReplayError("--isl/--osl make a synthetic workload; with a TRACE its own prompts are used "
                                 "(drop TRACE or --isl/--osl)")
    from sitsprof.policies.serving.reblock import reblock

    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    rb = reblock(trace, block_tokens)
    if requests is not None:
        raise ServingReplayError("--requests sizes the synthetic workload; a TRACE's requests are all replayed")
    return trace, workload.closed_loop(rb, concurrency), trace_path, fmt
