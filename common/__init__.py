"""What every sitsprof package shares and nothing else provides: the error base, one atomic
writer, one duration grammar, one size grammar, process-signal handling, one strict JSON
writer (`jsonout`) and one bounded metrics HTTP server (`httpserve`).

It sits below every other package and imports none of them (the build checks it), so that
`pmu`, `calibration` and the rest can all use it without depending on each other.
"""
