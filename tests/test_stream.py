"""Streaming replay (policies/engine/stream.py): hit for hit the in-memory replay.

Every streamable policy is replayed over generated traces cut into chunks of 1, 7, 1000
references and the whole trace, with its state grown from one block (so it grows at many
chunk boundaries), and compared with the policy's KERNEL reference by reference. The
incremental factoriser equals the whole-trace one; the oracleGeneral file path equals the
in-memory simulate on the same file; bad records are refused naming the record.
"""
from __future__ import annotations

import numpy as np
import pytest

from sitsprof.policies.classic import arc, belady, fifo, lfu, lirs, lru, prefix_lru, s3fifo, sieve, twoq
from sitsprof.policies.engine import stream
from sitsprof.policies.engine.stream import StreamError, file_pointer_base, stream_hits, stream_simulate, streamable
from sitsprof.policies.errors import PolicyEngineError, TraceFormatError
from sitsprof.policies.traces.factorize import Factorizer, factorize_int64
from sitsprof.policies.traces.oracle import ORACLE_DTYPE, write_oracle_general

STREAMED = [lru, fifo, lfu, sieve, lirs, arc, s3fifo, twoq, prefix_lru]
CHUNKS = [1, 7, 1000, None]


def _trace(seed: int, n: int = 3000, objects: int = 400) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.2, n), objects) - 1
    ids = rng.permutation(objects)[ranks].astype(np.int64) * 7919 + (1 << 40)  # sparse: hashed, not direct
    scan = np.arange(n // 10, dtype=np.int64) + (1 << 50)  # one pass of new ids: growth mid-trace
    at = n // 2
    return np.concatenate([ids[:at], scan, ids[at:]])


def _kernel_hits(module, ids, capacity, params):
    codes, k = factorize_int64(ids)
    hit = np.zeros(len(codes), dtype=np.uint8)
    offsets = np.arange(len(codes) + 1, dtype=np.int64)
    ev, maxres = module.KERNEL(codes, offsets, np.int64(k), np.int64(capacity), hit, **params)
    return hit, int(ev), int(maxres)


def _chunks(ids, size):
    size = len(ids) if size is None else size
    return [ids[i:i + size] for i in range(0, len(ids), size)]


PARAMS = {s3fifo: [{}, {"small_ratio": 0.25, "ghost_ratio": 2.0, "move_to_main_threshold": 1}],
          twoq: [{}, {"ain_ratio": 0.5, "aout_ratio": 1.5}], lirs: [{}, {"hir_ratio": 0.2}]}


@pytest.mark.parametrize("module", STREAMED, ids=lambda m: m.NAME)
@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: f"chunk{c or 'whole'}")
def test_stream_equals_kernel_hit_for_hit(module, chunk):
    assert streamable(module)
    for seed, capacity in ((1, 25), (2, 120), (3, 5000)):
        ids = _trace(seed)
        for params in PARAMS.get(module, [{}]):
            want, ev, maxres = _kernel_hits(module, ids, capacity, params)
            offsets = None
            if module is prefix_lru:  # one request per reference, like an oracleGeneral file
                offsets = [np.arange(len(c) + 1, dtype=np.int64) for c in _chunks(ids, chunk)]
            got, got_ev, got_max = stream_hits(module, _chunks(ids, chunk), capacity, params, offsets=offsets,
                                               first_blocks=1)
            assert np.array_equal(got, want), (module.NAME, capacity, params, int(np.flatnonzero(got != want)[0]))
            assert (got_ev, got_max) == (ev, maxres)


def test_prefix_lru_requests_across_chunks():
    """Requests of several blocks, chunks cut at request boundaries."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 9, 400)
    ids = rng.integers(0, 300, lengths.sum()).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    codes, k = factorize_int64(ids)
    want = np.zeros(len(ids), dtype=np.uint8)
    prefix_lru.KERNEL(codes, offsets, np.int64(k), np.int64(60), want)
    cuts = list(range(0, 401, 13)) + [400]
    chunks, offs = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        lo, hi = offsets[a], offsets[b]
        chunks.append(ids[lo:hi])
        offs.append(offsets[a:b + 1] - lo)
    got, _, _ = stream_hits(prefix_lru, chunks, 60, offsets=offs, first_blocks=1)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("chunk", [1, 7, 1000, 1 << 20])
def test_factorizer_equals_whole_trace_codes(chunk):
    rng = np.random.default_rng(9)
    ids = np.concatenate([rng.integers(-2**62, 2**62, 20_000), rng.integers(0, 50, 5_000),
                          rng.integers(-2**62, 2**62, 20_000)]).astype(np.int64)
    want, k = factorize_int64(ids)
    fac = Factorizer(bits=12)  # starts small: grows several times
    got = np.concatenate([fac.codes(ids[i:i + chunk]) for i in range(0, len(ids), chunk)])
    assert np.array_equal(got, want) and fac.n == k


def test_factorizer_uint64_ids_like_the_reader():
    ids = np.array([2**64 - 1, 5, 2**63, 5, 2**64 - 1], dtype=np.uint64)
    assert Factorizer().codes(ids).tolist() == [0, 1, 2, 1, 0]


def test_stream_simulate_equals_in_memory_on_oracle_file(tmp_path):
    from sitsprof.policies.sweep import simulate
    from sitsprof.policies.traces.oracle import read_oracle

    ids = _trace(11, n=20_000, objects=3000)
    sizes = (np.arange(len(ids)) % 5 + 1).astype(np.int64)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids, sizes=sizes)
    trace = read_oracle(path)
    modules = [lru, arc, s3fifo, lfu, prefix_lru]
    results, summary = stream_simulate(path, modules, [50, 700], chunk_refs=999)
    assert summary["references"] == len(ids) and summary["distinct_blocks"] == trace.n_blocks
    for r in results:
        want = simulate(trace, r.policy, r.capacity)
        assert (r.hits, r.evictions, r.max_resident) == (want.hits, want.evictions, want.max_resident)
        for key in ("block_hit_ratio", "token_hit_ratio", "prefix_hit_ratio"):
            assert getattr(r, key) == pytest.approx(getattr(want, key), abs=1e-12), key


def test_stream_simulate_matches_libcachesim(tmp_path):
    from libcachesim_ref import lcs_hit_ratio

    ids = _trace(12, n=30_000, objects=4000)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids)
    results, _ = stream_simulate(path, [lru, arc, s3fifo], [300], chunk_refs=4096)
    for r in results:
        assert r.block_hit_ratio == pytest.approx(lcs_hit_ratio(path, r.policy, 300), abs=1e-12), r.policy


def test_unstreamable_policy_refused():
    from types import SimpleNamespace

    from sitsprof.policies.adaptive import sits
    from sitsprof.policies.registry import get_policy, policy_names

    assert all(streamable(get_policy(name)) for name in policy_names())  # every registered policy has a resumable form
    whole_only = SimpleNamespace(NAME="whole-only", KERNEL=lfu.KERNEL)  # a policy without one
    with pytest.raises(StreamError, match="whole-only.*without --stream"):
        stream_hits(whole_only, [np.arange(5)], 3)
    with pytest.raises(StreamError, match="belady.*next use"):  # only a file gives the next uses
        stream_hits(belady, [np.arange(5)], 3)
    with pytest.raises(PolicyEngineError, match="sits streams only from an oracleGeneral file"):
        stream_hits(sits, [np.arange(5)], 3)  # it needs the trace's length and time span first


# ------------------------------------------------------------------ sits: windows of trace time
def _phased(seed: int) -> np.ndarray:
    """Zipf phases over two id ranges between one-pass scans: SITS switches behaviour."""
    rng = np.random.default_rng(seed)
    parts = []
    for j in range(6):
        parts.append(rng.zipf(1.2, 1500) % 1000 + 10**7 * (j % 2))
        parts.append(np.arange(1000) + 10**6 * (j + 1))
    return np.concatenate(parts).astype(np.int64)


SITS_PARAMS = [{}, {"window_s": 10.0, "score_threshold": 0.0, "margin": 0.0, "migrate_margin": 0.0, "memory": 0.5},
               {"window_s": 5.0, "window_refs": 300, "initial": "recency", "adapt": False}]


@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: f"chunk{c or 'whole'}")
def test_sits_streamed_equals_whole_trace_run(tmp_path, chunk):
    """Hit for hit and decision for decision sits.run (time windows, shadows, cost-model P99)."""
    from sitsprof.policies.adaptive import sits
    from sitsprof.policies.traces.oracle import read_oracle

    ids = _phased(41)
    sizes = np.arange(len(ids)) % 7 + 1
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids, timestamps=np.arange(len(ids)) // 50,
                                sizes=sizes)
    trace = read_oracle(path)
    switched = 0
    for params in SITS_PARAMS:
        for capacity in (100, 4100):  # 4100: shadows sample 1/4 of the blocks
            want = sits.run(trace, capacity, **params)
            (got,), _ = stream_simulate(path, [sits], [capacity], chunk_refs=chunk or len(ids), keep_hits=True,
                                        params={"sits": params})
            assert np.array_equal(got.request_hits, want.request_hits), (params, capacity)
            assert (got.hits, got.evictions, got.max_resident) == (want.hits, want.evictions, want.max_resident)
            assert got.extra["events"] == want.extra["events"], (params, capacity)
            for key in ("windows", "switches", "sample_shift", "behaviour_share"):
                assert got.extra[key] == want.extra[key], key
            switched += want.extra["switches"]
    assert switched >= 5  # the comparison covers switches, not only one behaviour


@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: f"chunk{c or 'whole'}")
def test_semantic_shard_streamed_equals_whole_trace_run(tmp_path, chunk):
    """Hit for hit, expiry for expiry and rebalance for rebalance semantic_shard.run."""
    from sitsprof.policies.adaptive import semantic_shard
    from sitsprof.policies.traces.oracle import read_oracle

    ids = _phased(42)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids, timestamps=np.arange(len(ids)) // 50,
                                sizes=np.arange(len(ids)) % 7 + 1)
    trace = read_oracle(path)
    migrated = expired = 0
    for params in ({}, {"window_s": 10.0, "ttl_s": 30.0, "gated": False, "shards": 5},
                   {"window_s": 7.0, "ttl_s": 15.0, "memory": 0.9}):
        for capacity in (100, 4100):
            want = semantic_shard.run(trace, capacity, **params)
            (got,), _ = stream_simulate(path, [semantic_shard], [capacity], chunk_refs=chunk or len(ids),
                                        keep_hits=True, params={"semantic-shard": params})
            assert np.array_equal(got.request_hits, want.request_hits), (params, capacity)
            assert (got.hits, got.evictions, got.max_resident) == (want.hits, want.evictions, want.max_resident)
            for key in ("shard_evictions", "shard_expirations", "cross_shard_hits", "events", "shard_eviction_rate"):
                assert got.extra[key] == want.extra[key], (key, params, capacity)
            migrated += sum(e["action"] == "migrate" for e in want.extra["events"])
            expired += sum(want.extra["shard_expirations"])
    assert migrated >= 20 and expired > 0  # slots moved and entries expired in what was compared


def test_semantic_shard_stream_refuses_keys_an_oracle_file_lacks(tmp_path):
    from sitsprof.policies.adaptive import semantic_shard

    path = write_oracle_general(tmp_path / "t.oracleGeneral", np.arange(50, dtype=np.int64))
    with pytest.raises(PolicyEngineError, match="shard key 'tenant'.*first-block"):
        stream_simulate(path, [semantic_shard], [20], params={"semantic-shard": {"shard_key": "tenant"}})


def test_adaptive_streamed_runs_take_the_cost_model_of_the_whole_trace_run(tmp_path):
    """Their P99 signal comes from the cost model: another model and miss cost, the same as
    the whole-trace run with them (and not the default's decisions)."""
    from sitsprof.policies.adaptive import semantic_shard, sits
    from sitsprof.policies.traces.oracle import read_oracle

    ids = _phased(43)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids, timestamps=np.arange(len(ids)) // 50)
    trace = read_oracle(path)
    cost = {"model": "deepseek-v2", "miss": "reload"}
    for module, params in ((sits, SITS_PARAMS[1]), (semantic_shard, {"window_s": 7.0})):
        want = module.run(trace, 100, **cost, **params)
        (got,), _ = stream_simulate(path, [module], [100], chunk_refs=777, keep_hits=True,
                                    params={module.NAME: params}, cost=cost)
        assert got.extra["events"] == want.extra["events"] and np.array_equal(got.request_hits, want.request_hits)
        assert want.extra["events"] != module.run(trace, 100, **params).extra["events"]


def test_sits_stream_refuses_the_threshold_engine(tmp_path):
    from sitsprof.policies.adaptive import sits

    path = write_oracle_general(tmp_path / "t.oracleGeneral", np.arange(50, dtype=np.int64))
    with pytest.raises(PolicyEngineError, match="threshold"):
        stream_simulate(path, [sits], [10], params={"sits": {"threshold": True}})


# ------------------------------------------------------------------ belady: next uses streamed
def _belady_files(tmp_path, ids):
    """The same trace as oracleGeneral files whose next_access_vtime is: counted from 0
    (write_oracle_general), from 1 (libCacheSim's traceConv), absent (-1 throughout, as
    bench_stream.py writes), and right in the head but wrong further on."""
    path = write_oracle_general(tmp_path / "from0.oracleGeneral", ids)
    rec = np.fromfile(path, dtype=ORACLE_DTYPE)
    nxt = rec["next_access_vtime"].copy()
    files = {"from0": path}
    rec["next_access_vtime"] = np.where(nxt >= 0, nxt + 1, -1)
    rec.tofile(files.setdefault("from1", tmp_path / "from1.oracleGeneral"))
    rec["next_access_vtime"] = -1
    rec.tofile(files.setdefault("absent", tmp_path / "absent.oracleGeneral"))
    rec["next_access_vtime"] = nxt
    late = int(np.flatnonzero(nxt[len(ids) // 2:] >= 0)[0]) + len(ids) // 2
    rec["next_access_vtime"][late] = -1  # a block said never to come back, which does
    rec.tofile(files.setdefault("broken", tmp_path / "broken.oracleGeneral"))
    return files


@pytest.mark.parametrize("chunk", CHUNKS, ids=lambda c: f"chunk{c or 'whole'}")
def test_belady_streamed_equals_in_memory_hit_for_hit(tmp_path, monkeypatch, chunk):
    from sitsprof.policies.sweep import simulate
    from sitsprof.policies.traces.oracle import read_oracle

    monkeypatch.setattr(stream, "HEAD_REFS", 500)  # the broken pointer lies past the head
    ids = _trace(31, n=4000, objects=500)
    files = _belady_files(tmp_path, ids)
    trace = read_oracle(files["from0"])
    want = {c: simulate(trace, "belady", c) for c in (1, 20, 150, 5000)}
    assert file_pointer_base(files["from0"]) == 0 and file_pointer_base(files["from1"]) == 1
    assert file_pointer_base(files["absent"]) is None and file_pointer_base(files["broken"]) == 0
    for kind, path in files.items():
        notes = []
        results, _ = stream_simulate(path, [belady, lru], list(want), chunk_refs=chunk or len(ids),
                                     keep_hits=True, note=notes.append)
        for r in results:
            if r.policy != "belady":
                continue
            w = want[r.capacity]
            assert np.array_equal(r.request_hits, w.request_hits), (kind, r.capacity)
            assert (r.hits, r.evictions, r.max_resident) == (w.hits, w.evictions, w.max_resident), (kind, r.capacity)
        assert bool(notes) == (kind in ("absent", "broken")), (kind, notes)
        if kind == "broken":
            assert "does not match the trace" in notes[0]


def test_belady_stream_state_grows_from_one_block(tmp_path):
    """Heap slots and positions grown at many chunk boundaries, the file's pointers used."""
    from sitsprof.policies.sweep import simulate
    from sitsprof.policies.traces.oracle import read_oracle

    ids = _trace(32, n=3000, objects=400)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids)
    trace = read_oracle(path)
    replay = stream.StreamReplay([(belady, 60, {})], keep_hits=True, first_blocks=1)
    fac = stream.Factorizer()
    future = stream._FileFuture(0, len(ids))
    stream._replay_pass(path, replay, fac, 37, future)
    assert future.broken_at is None
    (got,) = replay.results(len(ids), len(ids))
    want = simulate(trace, "belady", 60)
    assert np.array_equal(got.request_hits, want.request_hits) and got.evictions == want.evictions


def test_belady_prefix_file_pointers_past_its_end(tmp_path):
    """A file cut from a longer one (head -c) keeps pointers past its end: never, as in memory."""
    from sitsprof.policies.sweep import simulate

    ids = _trace(33, n=3000, objects=400)
    long = write_oracle_general(tmp_path / "long.oracleGeneral", ids)
    cut = tmp_path / "cut.oracleGeneral"
    cut.write_bytes(long.read_bytes()[: 2000 * ORACLE_DTYPE.itemsize])
    (got,), _ = stream_simulate(cut, [belady], [40], chunk_refs=300, keep_hits=True)
    want = simulate(ids[:2000], "belady", 40)
    assert np.array_equal(got.request_hits, want.request_hits)


def test_belady_computed_next_uses_leave_no_temporary_files(tmp_path):
    ids = _trace(34, n=2000, objects=300)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids)
    rec = np.fromfile(path, dtype=ORACLE_DTYPE)
    rec["next_access_vtime"] = -1
    rec.tofile(path)
    temp = tmp_path / "temp"
    temp.mkdir()
    notes = []
    (r,), _ = stream_simulate(path, [belady], [30], chunk_refs=256, temp_dir=temp, note=notes.append)
    assert r.hits > 0 and "computing each reference's next use" in notes[0]
    assert list(temp.iterdir()) == []


def test_bad_record_refused_naming_it(tmp_path):
    path = write_oracle_general(tmp_path / "t.oracleGeneral", np.arange(100, dtype=np.int64))
    rec = np.fromfile(path, dtype=ORACLE_DTYPE)
    rec["timestamp"][60] = 0  # goes back in time, in the second chunk of 50
    rec.tofile(path)
    with pytest.raises(TraceFormatError, match=r"record 61: timestamp 0 is earlier"):
        stream_simulate(path, [lru], [10], chunk_refs=50)


def test_cli_stream_equals_in_memory(cli, tmp_path):
    import json

    ids = _trace(21, n=8000, objects=1500)
    path = write_oracle_general(tmp_path / "t.oracleGeneral", ids)
    args = ("policy", "simulate", str(path), "-p", "lru,s3fifo,2q,belady,sits,semantic-shard", "-c", "40,10%",
            "--json")
    code, out, err = cli(*args, "--stream")
    assert code == 0, err
    streamed = json.loads(out)
    code, out, _ = cli(*args)
    assert code == 0
    whole = json.loads(out)
    assert streamed["trace"]["distinct_blocks"] == whole["trace"]["distinct_blocks"]
    pick = ("policy", "capacity", "hits", "block_hit_ratio", "prefix_hit_ratio", "evictions", "max_resident")
    assert [{k: r[k] for k in pick} for r in streamed["results"]] == [{k: r[k] for k in pick} for r in whole["results"]]
    code, out, err = cli("policy", "simulate", str(path), "-p", "lru", "-c", "40", "--stream")
    assert code == 0 and "(streamed)" in out and "TTFT) not computed when streaming" in out


def test_cli_stream_refusals(cli, tmp_path):
    import json

    from sitsprof.policies.registry import get_policy, policy_names

    path = write_oracle_general(tmp_path / "t.oracleGeneral", np.arange(50, dtype=np.int64))
    code, _, err = cli("policy", "simulate", str(path), "-p", "semantic-shard", "-c", "20", "--stream",
                       "--shard-key", "tenant")
    assert code == 2 and "no tenant" in err and len(err.strip().splitlines()) == 1
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2]}\n')
    code, out, err = cli("policy", "simulate", str(jsonl), "-p", "lru", "-c", "10", "--stream")
    assert code == 0 and "(streamed)" in out  # a Mooncake file streams too (tests/test_stream_lines.py)
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp,obj_id\n0,1\n1,2\n")
    code, _, err = cli("policy", "simulate", str(csv), "-p", "lru", "-c", "10", "--stream")
    assert code == 2 and "--stream reads oracleGeneral, Mooncake and Bailian traces" in err
    code, out, err = cli("policy", "simulate", str(path), "-p", "all", "-c", "10", "--stream", "--json")
    assert code == 0 and "leaves out" not in err
    assert {r["policy"] for r in json.loads(out)["results"]} == {get_policy(name).NAME for name in policy_names()}
