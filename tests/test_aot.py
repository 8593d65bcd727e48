"""Kernels compiled ahead of time (common/aot.py, policies/aot.py; issue 24): the JIT's results
without numba's start-up, and never a stale or mistyped call.

One build per module (every policy that streams, as `sitsprof compile --aot` builds it, ~15 s
of CPU) into a temporary folder; every check runs a
fresh interpreter on it, so the process under test imports only what the command does. The
reference is the same command with ``SITSPROF_AOT=0`` (numba's JIT, as before this module),
compared reference for reference; the JIT itself is checked against libCacheSim and the
whole-trace kernels elsewhere (test_stream.py, test_policies_classic.py).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from sitsprof.policies.traces.oracle import ORACLE_DTYPE

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="numba.pycc needs a C compiler")

POLICIES = ["lru", "arc"]  # the runs that must not import numba (lirs's window is left out: pycc refuses it)


@pytest.fixture(scope="module")
def aot_env(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("aot")
    env = {**os.environ, "SITSPROF_AOT_DIR": str(folder)}
    env.pop("SITSPROF_AOT", None)
    env.pop("SITSPROF_JIT", None)
    code = "import json; from sitsprof.policies.aot import build; print(json.dumps(build()))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(POLICIES) < set(summary["policies"]) and summary["exports"] >= 20, summary
    return env


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    """Sparse 64-bit ids (hashed, not a direct table), a Zipf head and a scan of new ids (the
    id table and the policies' state grow mid-chunk), sizes 1-4."""
    rng = np.random.default_rng(24)
    n = 200_000
    ranks = np.minimum(rng.zipf(1.1, n), 90_000) - 1
    ids = ranks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345)
    ids[n // 2:n // 2 + 60_000] = np.arange(60_000, dtype=np.uint64) + np.uint64(1 << 60)
    rec = np.zeros(n, dtype=ORACLE_DTYPE)
    rec["obj_id"] = ids
    rec["timestamp"] = np.arange(n) // 50
    rec["obj_size"] = 1 + rng.integers(0, 4, n)
    rec["next_access_vtime"] = -1
    path = tmp_path_factory.mktemp("trace") / "t.oracleGeneral"
    rec.tofile(path)
    return path


# The streamed replay as `policy simulate` runs it, with AOT allowed: its results, a hash of
# every run's per-reference hit flags, and whether numba was imported.
RUN = """
import hashlib, json, sys
from sitsprof.common.jit import allow_aot, decide
decide(False)
on = allow_aot()
from sitsprof.policies.engine import stream
from sitsprof.policies.engine.stream import stream_simulate
from sitsprof.policies.registry import get_policy
stream.FIRST_IDS = int(sys.argv[5])  # the id table's first size: small, it grows (rehashes) mid-trace
res, summary = stream_simulate(sys.argv[1], [get_policy(p) for p in sys.argv[2].split(",")],
                               [int(c) for c in sys.argv[3].split(",")], chunk_refs=int(sys.argv[4]), keep_hits=True)
print(json.dumps({"allowed": on, "numba": "numba" in sys.modules, "distinct": summary["distinct_blocks"],
                  "runs": [[r.policy, r.capacity, r.hits, r.evictions, r.max_resident, r.token_hit_ratio,
                            hashlib.sha256(r.request_hits.tobytes()).hexdigest()] for r in res]}))
"""


def _run(env, *args, aot: bool = True, first_ids: int = 1000) -> dict:
    env = dict(env)
    if not aot:
        env["SITSPROF_AOT"] = "0"
    done = subprocess.run([sys.executable, "-c", RUN, *map(str, args), str(first_ids)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("chunk", "first_ids"), [(7_001, 1000), (1 << 20, 1000), (1 << 20, 1_500_000)])
def test_aot_replay_is_the_jit_replay_without_numba(aot_env, trace_file, chunk, first_ids):
    """Chunks of 7,001 and 1M references; an id table that grows mid-trace (first sized for
    1,000 ids: 2**16 slots, 49,152 ids) and one sized for the whole file (as stream_simulate sizes it)."""
    caps = "100,5000,60000"
    got = _run(aot_env, trace_file, ",".join(POLICIES), caps, chunk, first_ids=first_ids)
    want = _run(aot_env, trace_file, ",".join(POLICIES), caps, chunk, aot=False, first_ids=first_ids)
    assert got["allowed"] and not want["allowed"]
    assert not got["numba"], "the ahead-of-time path imported numba"
    assert want["numba"]
    assert got["runs"] == want["runs"]
    assert got["distinct"] == want["distinct"] > 49_152  # more than the smallest table holds


def _edited_manifest(aot_env, folder, module: str, edit) -> dict:
    """A copy of the build whose manifest entries for `module`'s kernels are `edit`ed (None: dropped)."""
    shutil.copytree(aot_env["SITSPROF_AOT_DIR"], folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    for name in list(manifest["kernels"]):
        if name.startswith(module + ":"):
            entry = edit(manifest["kernels"][name])
            if entry is None:
                del manifest["kernels"][name]
            else:
                manifest["kernels"][name] = entry
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return {**aot_env, "SITSPROF_AOT_DIR": str(folder)}


def test_a_policy_not_built_compiles_with_numba(aot_env, trace_file, tmp_path):
    """fifo's kernels not in the module: fifo goes to numba, lru with it, with the same hits."""
    env = _edited_manifest(aot_env, tmp_path / "nofifo", "sitsprof.policies.classic.fifo", lambda entry: None)
    got = _run(env, trace_file, "lru,fifo", "5000", 1 << 20)
    want = _run(aot_env, trace_file, "lru,fifo", "5000", 1 << 20, aot=False)
    assert got["numba"] and got["runs"] == want["runs"]
    assert not _run(aot_env, trace_file, "lru,fifo", "5000", 1 << 20)["numba"]  # with fifo built: none


def test_a_changed_source_is_not_run_from_a_stale_build(aot_env, trace_file, tmp_path):
    """A manifest whose key for lru's module is not its source's: lru compiles with numba."""
    env = _edited_manifest(aot_env, tmp_path / "stale", "sitsprof.policies.classic.lru",
                           lambda entry: {**entry, "key": "0" * 16})
    got = _run(env, trace_file, "lru", "5000", 1 << 20)
    assert got["numba"]
    assert got["runs"] == _run(aot_env, trace_file, "lru", "5000", 1 << 20)["runs"]


CHECK = """
import json, numpy as np
from sitsprof.common import aot
from sitsprof.policies.traces.factorize import _hash_chunk
table = np.zeros(3 << 12, np.uint32)
codes = np.zeros(10, np.int32)
keys = np.arange(10, dtype=np.int64)
ok = aot.find(_hash_chunk, (keys, 0, table, 12, 0, 100, codes))
out = {"ok": ok is not None,
       "int32 keys": aot.find(_hash_chunk, (keys.astype(np.int32), 0, table, 12, 0, 100, codes)) is not None,
       "strided codes": aot.find(_hash_chunk, (keys, 0, table, 12, 0, 100, np.zeros(20, np.int32)[::2])) is not None,
       "read-only table": aot.find(_hash_chunk, (keys, 0, np.frombuffer(bytes(table), np.uint32), 12, 0, 100, codes))
           is not None,
       "float scalar": aot.find(_hash_chunk, (keys, 0.0, table, 12, 0, 100, codes)) is not None,
       "strided keys": aot.find(_hash_chunk, (np.arange(20, dtype=np.int64)[::2], 0, table, 12, 0, 100, codes))
           is not None,
       "too few": aot.find(_hash_chunk, (keys, 0, table)) is not None}
if ok is not None:
    out["codes"] = [list(ok(keys, 0, table, 12, 0, 100, codes)), codes.tolist()]
print(json.dumps(out))
"""


def test_only_the_exact_types_it_was_built_for(aot_env):
    """pycc's functions do not check their arguments: find() gives one only for the numba types
    of an exported signature (here _hash_chunk's, keys in any layout), else None (numba's
    dispatcher then compiles, as before)."""
    done = subprocess.run([sys.executable, "-c", CHECK], env=aot_env, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got.pop("codes") == [[10, 10], list(range(10))]
    assert got == {"ok": True, "int32 keys": False, "strided codes": False, "read-only table": False,
                   "float scalar": False, "strided keys": True, "too few": False}


@pytest.fixture(scope="module")
def mooncake_file(tmp_path_factory):
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    return write_mooncake_jsonl(generate_requests(seed=7, duration_s=120.0), tmp_path_factory.mktemp("mc") / "m.jsonl")


# `policy simulate` in-process, as typed: its JSON document (less the seconds) and whether numba loaded.
CLI = ("import sys, io, contextlib; from sitsprof.cli.main import main\n"
       "out = io.StringIO()\n"
       "with contextlib.redirect_stdout(out): main(sys.argv[1:])\n"
       "print(out.getvalue()); print('numba' in sys.modules)")


def _documents(env, path, policies: str) -> list[tuple[dict, bool]]:
    """(document, numba imported) of `policy simulate PATH -p POLICIES --stream --json`, with the
    module and with SITSPROF_AOT=0."""
    args = ["policy", "simulate", str(path), "-p", policies, "-c", "100,5000", "--stream", "--json"]
    out = []
    for extra in ({}, {"SITSPROF_AOT": "0"}):
        done = subprocess.run([sys.executable, "-c", CLI, *args], env={**env, **extra}, capture_output=True,
                              text=True, check=True)
        *body, numba = done.stdout.strip().splitlines()
        doc = json.loads("\n".join(body))
        for r in doc["results"]:
            r.pop("seconds")
        doc["trace"].pop("read_seconds", None)
        out.append((doc, numba == "True"))
    return out


@pytest.mark.parametrize("which", ["oracle", "mooncake"])
def test_the_plain_command_streams_without_numba_and_says_the_same(aot_env, trace_file, mooncake_file, which):
    """`policy simulate --stream --json` with the module and with SITSPROF_AOT=0: the same document
    (but the seconds), from an oracleGeneral file and from a Mooncake file (stream_lines)."""
    (got, got_numba), (want, want_numba) = _documents(aot_env, trace_file if which == "oracle" else mooncake_file,
                                                      "lru,arc")
    assert not got_numba and want_numba
    assert got == want


def test_compile_aot_says_why_not_and_goes_on(monkeypatch):
    """`sitsprof compile --aot` where the module cannot be built (no C compiler, a numba without
    pycc): one note naming the cause, no error; the streamed replay keeps numba's JIT."""
    from sitsprof.cli.aotbuild import build_aot
    from sitsprof.policies import aot as builder

    def fails(names, note=None):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'cc'")

    monkeypatch.setattr(builder, "build", fails)
    notes = []
    done = build_aot("lru,arc", notes.append)
    assert done == {"error": "FileNotFoundError: [Errno 2] No such file or directory: 'cc'"}
    assert len(notes) == 1 and "not built" in notes[0] and "'cc'" in notes[0] and "numba as before" in notes[0]


@pytest.mark.parametrize("which", ["oracle", "mooncake"])
def test_every_policy_streams_the_same_from_the_module(aot_env, trace_file, mooncake_file, which):
    """`-p all --stream` (every policy that streams from the file: belady's next uses computed,
    sits's and semantic-shard's windows) with the module and with SITSPROF_AOT=0: the same document."""
    (got, _), (want, _) = _documents(aot_env, trace_file if which == "oracle" else mooncake_file, "all")
    assert len(got["results"]) >= 2 * 9
    assert got == want


def test_compile_aot_builds_the_module_and_says_where(tmp_path):
    """`sitsprof compile --aot -p lru --json`: the module built for lru alone, its summary in the
    JSON beside the policies' (numba's cache), its file and manifest where SITSPROF_AOT_DIR says."""
    env = {**os.environ, "SITSPROF_AOT_DIR": str(tmp_path / "aot")}
    env.pop("SITSPROF_AOT", None)
    done = subprocess.run([sys.executable, "-m", "sitsprof.cli.main", "compile", "--aot", "-p", "lru", "--json"],
                          env=env, capture_output=True, text=True, check=True)
    summary = json.loads(done.stdout)["aot"]
    assert summary["policies"] == ["lru"] and summary["exports"] >= 3
    assert (tmp_path / "aot" / summary["file"]).is_file() and (tmp_path / "aot" / "manifest.json").is_file()
    assert "ahead of time" in done.stderr
