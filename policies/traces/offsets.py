"""Request offsets (CSR): where each request's references begin, computed in one place.

Every replay, the cost model and the tenancy metrics index requests through these offsets
(`Trace.request_offsets`). One compiled pass over the non-decreasing request column, with
no temporary beyond the int64 result (np.bincount would first copy an int32 column to
intp: a second trace-sized array on multi-million-reference traces).
"""
from __future__ import annotations

import numpy as np

from sitsprof.common.jit import njit

__all__ = ["request_offsets"]


def request_offsets(request, n_requests) -> np.ndarray:
    """Offsets such that the references of request r are [offsets[r], offsets[r+1]).

    The array comes from numpy, not from inside the compiled loop: numpy asks the kernel for
    huge pages on large arrays, where numba's allocator faults every 4 KiB page in (on 5M
    references: 0.034 s of CPU for the loop with its own array, 0.008 s with numpy's)."""
    offsets = np.empty(int(n_requests) + 1, dtype=np.int64)
    _fill_offsets(request, n_requests, offsets)
    return offsets


@njit(cache=True)
def _fill_offsets(request, n_requests, offsets):
    r = 0
    for i in range(request.shape[0]):
        while r <= request[i]:
            offsets[r] = i
            r += 1
    while r <= n_requests:
        offsets[r] = request.shape[0]
        r += 1
