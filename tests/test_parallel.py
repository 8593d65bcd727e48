"""Parallel sweeps (policies/parallel.py, issue 14): worker processes and a Dask cluster return
exactly what the serial loop returns (every field of every SimResult but its wall time, the
per-request hits included), in the serial order, with progress reported for every run."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from sitsprof.policies import parallel, sweep
from sitsprof.policies.engine.replay import Prepared
from sitsprof.policies.registry import select_policies
from sitsprof.policies.traces import generator


@pytest.fixture(scope="module")
def trace():
    return generator.generate_workload(seed=3, duration_s=120)


def _plain(results):
    out = []
    for r in results:
        d = r.to_dict(request_hits=True)
        d.pop("seconds")  # wall time, the one field that may differ
        out.append(d)
    return out


def _progress():
    calls = []
    return calls, lambda done, total, label: calls.append((done, total, label))


def test_processes_match_serial_for_every_policy(trace):
    policies = select_policies("all")
    caps = [50, 400]
    serial_calls, serial_progress = _progress()
    serial = sweep.run_policies(trace, policies, caps, progress=serial_progress)
    calls, progress = _progress()
    spread = sweep.run_policies(trace, policies, caps, progress=progress, jobs=2)
    assert _plain(spread) == _plain(serial)
    assert [(r.policy, r.capacity) for r in spread] == [(r.policy, r.capacity) for r in serial]
    for a, b in zip(spread, serial):  # sent back compacted, restored to the serial dtype
        np.testing.assert_array_equal(a.request_hits, b.request_hits)
        assert a.request_hits.dtype == b.request_hits.dtype == np.int32
    # every run reported once, done counting 1..total, the labels the serial sweep gives
    assert [c[0] for c in calls] == list(range(1, len(serial) + 1))
    assert {c[1] for c in calls} == {len(serial)}
    assert sorted(c[2] for c in calls) == sorted(c[2] for c in serial_calls)


def test_plain_sweep_processes_match_serial(trace):
    policies = ["lru", "arc", "s3fifo"]
    caps = [10, 100, 1000]
    assert _plain(sweep.simulate_many(trace, policies, caps, jobs=2)) == _plain(
        sweep.simulate_many(trace, policies, caps))


def test_processes_see_the_trace_as_serial_does(trace):
    # the packed trace comes back equal, constant columns still zero-stride (so the kernels
    # take the same paths and the same compiled specialisations), mapped columns writeable
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        back = parallel.unpack_trace(parallel.pack_trace(trace, folder))
        for name in ("time", "request", "block", "original_id", "position", "tokens", "tenant"):
            a, b = getattr(trace, name), getattr(back, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), name
            assert (a.strides[0] == 0) == (b.strides[0] == 0), name
        assert back.block.flags.writeable
        assert (back.n_blocks, back.block_tokens, back.tenant_names) == (
            trace.n_blocks, trace.block_tokens, trace.tenant_names)
        del back


def test_head_trace_is_a_valid_prefix(trace):
    head = parallel.head_trace(trace, 500)
    assert 500 <= len(head) < len(trace)
    assert head.n_requests == int(trace.request[499]) + 1
    assert head.n_blocks == int(head.block.max()) + 1
    assert np.array_equal(head.block, trace.block[:len(head)])
    Prepared(head)  # offsets and weights build


@pytest.mark.slow
def test_no_worker_compiles_after_the_warm_up(trace):
    # the parent compiles (or loads) each kernel once; workers then only load cached code
    # (forkserver: the workers do not inherit this process's compiled code, they load the cache)
    items = [("sitsprof.policies.classic.lru", c, {}) for c in (10, 100, 1000)]
    counts = parallel.map_runs(_compiles_in_run, trace, items, setup=Prepared, jobs=2, warm_items=items[:1],
                               method="forkserver")
    assert counts == [0, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_every_start_method_matches_serial(trace, method):
    items = [(f"sitsprof.policies.classic.{name}", c, {}) for name in ("lru", "arc") for c in (10, 300)]
    serial = parallel.map_runs(sweep._plain_task, trace, items, setup=Prepared)
    spread = parallel.map_runs(sweep._plain_task, trace, items, setup=Prepared, jobs=2, method=method)
    assert _plain(spread) == _plain(serial)


def test_start_method_never_forks_beside_a_thread():
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert parallel.start_method() in ("forkserver", "spawn")
    finally:
        stop.set()
        other.join()
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        assert parallel.start_method() == "fork"


COLD_CACHE_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from sitsprof.policies import parallel
from sitsprof.policies.engine.replay import Prepared
from sitsprof.policies.traces import generator
from test_parallel import _compiles_in_run

trace = generator.generate_workload(seed=3, duration_s=20)
items = [("sitsprof.policies.classic.fifo", c, {}) for c in (10, 100, 1000)]
for method in ("fork", "forkserver"):
    counts = parallel.map_runs(_compiles_in_run, trace, items, setup=Prepared, jobs=2, warm_items=items[:1],
                               method=method)
    print(method, counts)
"""


@pytest.mark.slow
def test_a_cold_cache_compiles_in_the_parent_only(tmp_path):
    # a fresh numba cache: the parent's warm-up compiles; forked workers inherit the code, a
    # forkserver's workers load what the warm-up cached; no worker compiles
    import os
    import subprocess
    from pathlib import Path

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    out = subprocess.run([sys.executable, "-c", COLD_CACHE_SCRIPT, str(Path(__file__).parent)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["fork [0, 0, 0]", "forkserver [0, 0, 0]"]
    assert any((tmp_path / "numba-cache").rglob("*.nbc"))  # the warm-up did compile, into the fresh cache


def _compiles_in_run(trace, prep, item, shared):
    from sitsprof.policies.engine.compiling import watch_compiles

    with watch_compiles() as stats:
        sweep._plain_task(trace, prep, item, shared)
    return stats["count"]


def test_auto_jobs():
    assert parallel.auto_jobs(1, 10**9) == 1  # one run: nothing to spread
    assert parallel.auto_jobs(30, 1000) == 1  # too little work to repay starting workers
    assert parallel.auto_jobs(30, 10**7) == min(parallel.cpu_count(), 30)
    assert parallel.auto_jobs(2, 10**8) == min(parallel.cpu_count(), 2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "two"])
def test_bad_jobs_is_one_clear_error(trace, bad):
    with pytest.raises(parallel.ParallelError, match="--jobs must be a whole number"):
        sweep.simulate_many(trace, ["lru"], [10, 20], jobs=bad)


def test_cli_jobs_and_refusals(cli, tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    generator.write_mooncake_jsonl(generator.generate_requests(seed=4, duration_s=60), path)
    code, serial, _ = cli("policy", "simulate", str(path), "-p", "lru,arc", "-c", "10,100", "--csv", "--jobs", "1")
    assert code == 0
    code, spread, _ = cli("policy", "simulate", str(path), "-p", "lru,arc", "-c", "10,100", "--csv", "--jobs", "2")
    assert code == 0

    def rows(text):  # drop the wall-time column
        lines = [line.split(",") for line in text.strip().splitlines()]
        keep = [i for i, name in enumerate(lines[0]) if "seconds" not in name]
        return [[line[i] for i in keep] for line in lines]

    assert rows(spread) == rows(serial)
    code, _, err = cli("policy", "simulate", str(path), "--jobs", "0")
    assert code == 2 and "--jobs" in err
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    code, _, err = cli("policy", "simulate", str(path), "-p", "lru", "--cluster", "tcp://127.0.0.1:1")
    assert code == 2
    assert "needs Dask distributed" in err and "sitsprof[cluster]" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_local_dask_cluster_matches_serial(trace):
    distributed = pytest.importorskip("distributed", reason="the cluster extra (pip install 'sitsprof[cluster]')")
    policies = ["lru", "arc", "s3fifo", "sits"]
    caps = [50, 400]
    serial = sweep.run_policies(trace, policies, caps)
    calls, progress = _progress()
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        remote = sweep.run_policies(trace, policies, caps, progress=progress, cluster=cluster.scheduler_address)
        with distributed.Client(cluster) as client:  # a Client works too, and the plain sweep
            plain = sweep.simulate_many(trace, policies[:3], caps, cluster=client)
    assert _plain(remote) == _plain(serial)
    assert [c[0] for c in calls] == list(range(1, len(serial) + 1))
    assert _plain(plain) == _plain(sweep.simulate_many(trace, policies[:3], caps))


def test_results_travel_small_and_arrive_equal():
    # what a worker sends back: 0/1 hit counts bit-packed (8 to a byte), other counts in the
    # smallest unsigned type; what arrives equals what was sent, field for field
    import pickle

    from sitsprof.policies.engine.replay import SimResult, hit_flags_of, set_hit_flags

    rng = np.random.default_rng(3)

    def result(hits):
        return SimResult("lru", 10, len(hits), int(hits.sum()), 0.5, 0.5, 0.5, 1, 10, hits, 0.1)

    flags = (rng.random(100_003) < 0.3).astype(np.uint8)
    lazy = result(np.zeros(0, dtype=np.int32))
    set_hit_flags(lazy, flags.copy())
    built = result((flags != 0).astype(np.int32))
    counts = result(rng.integers(0, 200, 5_001).astype(np.int32))
    for original in (lazy, built, counts):
        want = original.request_hits.copy()
        sent = parallel._compact(pickle.loads(pickle.dumps(original)))
        size = len(pickle.dumps(sent))
        back = parallel._expand(pickle.loads(pickle.dumps(sent)))
        assert back.request_hits.dtype == np.int32 and np.array_equal(back.request_hits, want)
        assert back.to_dict(request_hits=True) == original.to_dict(request_hits=True)
        assert size < want.nbytes / (16 if want.max() <= 1 else 3)
    arrived = parallel._expand(parallel._compact(pickle.loads(pickle.dumps(built))))
    assert hit_flags_of(arrived) is not None  # 0/1 counts arrive unbuilt: nothing widened in the parent
