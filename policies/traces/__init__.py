"""Traces: the bottom layer of the policy engine, where trace files become `Trace` columns.

Everything above (the classic policies' kernels, the engine, the cost model, the adaptive
policies) replays a `Trace` and never reads a file, so a new trace format is one reader
module here and one line in `detect.py`; nothing above changes. This layer imports nothing
of `policies` but its own modules and `policies.errors`. Import from the modules
(`traces.detect.read_trace`, `traces.trace.Trace`, ...): this package re-exports nothing.
"""
