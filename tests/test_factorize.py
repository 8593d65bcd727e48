"""The compiled dense-id factorisation equals pandas.factorize (first-appearance order)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sitsprof.policies.traces.factorize import factorize_int64
from sitsprof.policies.traces.ids import dense_ids


def _first_appearance(ids: np.ndarray) -> np.ndarray:
    """Reference codes from np.unique: rank of each id's first index among first indices."""
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[inverse.ravel()]


def _check(ids: np.ndarray) -> None:
    codes, k = dense_ids(ids)
    expect, uniques = pd.factorize(ids, sort=False)
    assert codes.dtype == np.int32 and k == len(uniques)
    assert codes.tolist() == expect.tolist()
    assert codes.tolist() == _first_appearance(ids).tolist()


@settings(max_examples=200, deadline=None)
@given(arrays(np.int64, st.integers(1, 300), elements=st.integers(-(2**63), 2**63 - 1)))
def test_any_int64_matches_pandas(ids):  # wide range: the hash table
    _check(ids)


@settings(max_examples=200, deadline=None)
@given(arrays(np.int64, st.integers(1, 300), elements=st.integers(-40, 40)))
def test_narrow_range_matches_pandas(ids):  # narrow range: the direct table
    _check(ids)


@settings(max_examples=100, deadline=None)
@given(arrays(np.uint64, st.integers(1, 200), elements=st.integers(0, 2**64 - 1)))
def test_uint64_keeps_distinct_ids(ids):
    codes, k = dense_ids(ids)
    assert codes.tolist() == pd.factorize(ids, sort=False)[0].tolist()
    assert k == len(np.unique(ids))


def test_extremes_and_growth():
    rng = np.random.default_rng(3)
    edge = np.array([-(2**63), 2**63 - 1, 0, -1, 2**63 - 1, -(2**63)], dtype=np.int64)
    _check(edge)
    # Many distinct keys spread over the whole range: the hash table doubles several times.
    ids = rng.integers(-(2**63), 2**63 - 1, size=20_000, dtype=np.int64)
    _check(np.concatenate([ids, ids[::-1], ids[:5000]]))
    # Multiples of a large power of two (bad for a naive modulo hash).
    _check(np.repeat(np.arange(5000, dtype=np.int64) << 40, 3))
    # Direct table with a large offset.
    _check(rng.integers(2**62, 2**62 + 5000, size=30_000, dtype=np.int64))


def test_empty_and_other_dtypes():
    codes, k = factorize_int64(np.zeros(0, dtype=np.int64))
    assert codes.dtype == np.int32 and len(codes) == 0 and k == 0
    _check(np.array([5, 3, 5, 7], dtype=np.int32))
    _check(np.array([5, 3, 5, 7], dtype=np.uint8))
    codes, k = dense_ids(np.array([1.5, 2.5, 1.5]))  # pandas fallback for floats
    assert codes.tolist() == [0, 1, 0] and k == 2


def test_oracle_and_mooncake_paths_do_not_import_pandas(tmp_path):
    """pandas costs ~50 MB of resident memory: replaying an oracle or Mooncake trace must not
    load it (the CSV and request readers may)."""
    import subprocess
    import sys

    from sitsprof.policies.traces.oracle import write_oracle_general

    oracle = write_oracle_general(tmp_path / "t.oracleGeneral", np.array([5, 1, 5, 2**40, 1]))
    mooncake = tmp_path / "t.jsonl"
    mooncake.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [7, 8]}\n'
                        '{"timestamp": 5, "input_length": 100, "output_length": 3, "hash_ids": [7]}\n')
    code = (
        "import sys\n"
        "from sitsprof.policies.sweep import simulate\n"
        "from sitsprof.policies.engine.mrc import lru_hit_ratio_curve\n"
        "from sitsprof.policies.traces.detect import read_trace\n"
        f"for path in ({str(oracle)!r}, {str(mooncake)!r}):\n"
        "    trace = read_trace(path)\n"
        "    simulate(trace, 'lru', 2)\n"
        "    lru_hit_ratio_curve(trace, [1, 2])\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
