"""SITSPROF_JIT governs `policy replay` too (issue 24): the serving modules use the lazy
`common.jit.njit`, so under SITSPROF_JIT=python numba is never imported and the replay runs
the kernels' own Python source, and that gives the compiled replay's document, every policy,
both engines, with preemptions."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

PROBE = """
import io, contextlib, json, sys
from sitsprof.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "numba": "numba" in sys.modules, "doc": json.loads(out.getvalue())}))
"""


def _strip(d):
    """The document without what differs between two runs of the same replay (timings)."""
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if "second" not in k and "wall" not in k}
    if isinstance(d, list):
        return [_strip(x) for x in d]
    return d


@pytest.fixture(scope="module")
def small_requests(tmp_path_factory):
    return write_mooncake_jsonl(generate_requests(seed=2, duration_s=5.0), tmp_path_factory.mktemp("j") / "w.jsonl")


@pytest.mark.parametrize("args", [
    ["-p", "all", "-c", "100,800", "--rate-scale", "8", "--max-num-seqs", "3", "--max-num-batched-tokens", "512"],
    ["--engine", "sglang", "-p", "lru", "-c", "300", "--rate-scale", "4", "--max-num-seqs", "4"],
    ["--engine", "sglang", "-p", "lru", "-c", "150", "--rate-scale", "4", "--prefill-alone", "--sglang-admission"],
])
def test_interpreted_replay_is_the_compiled_one_without_numba(cli, small_requests, args):
    argv = ["policy", "replay", str(small_requests), *args, "--json"]
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          env={**os.environ, "SITSPROF_JIT": "python"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["code"] == 0 and got["numba"] is False
    code, out, err = cli(*argv)  # this process: compiled (the suite's kernels are)
    assert code == 0, err
    compiled = json.loads(out)
    assert _strip(got["doc"]) == _strip(compiled)
    if args[1] == "all":
        rows = compiled["replay"]
        assert len(rows) == 16 and sum(r["preemptions"] for r in rows) > 0
