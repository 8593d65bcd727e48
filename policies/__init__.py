"""The SITS policy engine: KV-cache block traces, replacement policies, miss-ratio curves, costs.

In layers, each importing only those below it (checked by import-linter, see
docs/CONTRACTS.md): `registry`, `sweep`, `demo`, `claims` (policies by name) > `adaptive/`
> `cost/` > `engine/` > `classic/` | `traces/`. Outside itself it imports only
`sitsprof.common` and `sitsprof.calibration`. This package re-exports nothing.
"""
# Before any kernel module imports numba: one per-user kernel cache (issue 14; common/numba_cache.py).
from sitsprof.common.numba_cache import configure as _configure_numba_cache

_configure_numba_cache()
