"""The one multiplicative-hash constant shared by the factorisation, SITS and the shards.

Fibonacci hashing: multiply a 64-bit key by 2^64 / golden ratio (rounded to odd) and keep
the top bits; consecutive keys land far apart, so block ids that arrive in runs still spread
evenly over hash slots, sample sets and shards. A module-level `np.uint64` is read as a
compile-time constant by the `@njit` functions that import it.
"""
from __future__ import annotations

import numpy as np

__all__ = ["GOLDEN"]

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
