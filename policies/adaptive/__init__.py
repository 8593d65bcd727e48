"""Adaptive policies: caches that watch the trace (time, tenants, cost) and change how they serve.

Unlike the classic kernels they need the whole `Trace` and the cost model, so each exposes
`run(trace, capacity, **PARAMS)` besides the engine-contract `KERNEL`
(docs/CONTRACTS.md). Shared pieces sit lower than the policies that use them: window
signals (`signals.py`), shadow replays (`shadows.py`), the hybrid cache (`hybrid.py`) and
the front-buffer protocol (`front.py`). Import from the modules: this package re-exports
nothing.
"""
