"""Cost: turn a replay's hit flags into time (TTFT per request, tokens/s) on a calibration.

Between the engine (hit flags) and the adaptive policies (which price every window to
decide); reads GPU figures only through `sitsprof.calibration`. Import from the modules:
this package re-exports nothing.
"""
