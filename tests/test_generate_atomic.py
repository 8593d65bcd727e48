"""`policy generate` writes atomically (issue 12 item 9).

Interrupted mid-write, the generator used to leave a shorter trace that still read without a
warning, in place of the old file. Each test lets the writer get part-way, then raises (as a
Ctrl-C or a full disk would), and requires the old file byte for byte and no temporary file.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

from sitsprof.policies.traces import csvfile, generator, oracle


class Interrupted(KeyboardInterrupt):
    """What a Ctrl-C mid-write raises."""


def _after(n: int, func):
    """`func`, raising Interrupted on its (n+1)-th call."""
    calls = {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > n:
            raise Interrupted
        return func(*args, **kwargs)

    return wrapped


def _generate(cli, out, kind, duration="120"):
    code, stdout, err = cli("policy", "generate", str(out), "--as", kind, "--duration", duration)
    assert code == 0, err
    return out.read_bytes()


def _no_leftovers(folder, name):
    assert sorted(p.name for p in folder.iterdir()) == [name]


@pytest.mark.parametrize("kind, method", [("mooncake", "mooncake_record"), ("requests", "design_record")])
def test_interrupted_jsonl_generate_keeps_the_old_file(cli, tmp_path, monkeypatch, kind, method):
    """12.9: the JSONL writers (Mooncake and request formats), interrupted after 50 records."""
    out = tmp_path / "trace.jsonl"
    old = _generate(cli, out, kind, duration="600")
    monkeypatch.setattr(generator.Request, method, _after(50, getattr(generator.Request, method)))
    code, _, err = cli("policy", "generate", str(out), "--as", kind, "--duration", "60", "--seed", "7")
    assert code == 130, err  # click turns the KeyboardInterrupt into "aborted"
    assert out.read_bytes() == old
    _no_leftovers(tmp_path, "trace.jsonl")


def test_interrupted_csv_write_keeps_the_old_file(tmp_path):
    """12.9: write_csv (`--as csv`), its rows failing part-way."""
    out = tmp_path / "trace.csv"
    out.write_text("timestamp,obj_id,size,tenant\n0.0,1,1,a\n")
    old = out.read_bytes()

    def rows():
        yield from (1, 1)
        raise Interrupted

    trace = types.SimpleNamespace(
        time=np.zeros(3), original_id=np.arange(3), tokens=types.SimpleNamespace(tolist=rows),
        tenant=np.zeros(3, dtype=np.int32), tenant_names=("a",),
    )
    with pytest.raises(Interrupted):
        csvfile.write_csv(out, trace)
    assert out.read_bytes() == old
    _no_leftovers(tmp_path, "trace.csv")


def test_interrupted_oracle_write_keeps_the_old_file(tmp_path, monkeypatch):
    """12.9: write_oracle_general (`--as oracle`), interrupted after its first chunk."""
    out = tmp_path / "trace.oracleGeneral"
    oracle.write_oracle_general(out, np.arange(1000, 1010))
    old = out.read_bytes()

    class Breaks(np.ndarray):
        def __getitem__(self, key):
            if isinstance(key, slice) and (key.start or 0) > 0:
                raise Interrupted
            return np.asarray(self).__getitem__(key)

    real = oracle.next_access_vtime
    monkeypatch.setattr(oracle, "next_access_vtime", lambda ids: real(ids).view(Breaks))
    with pytest.raises(Interrupted):
        oracle.write_oracle_general(out, np.arange(100), chunk=10)
    assert out.read_bytes() == old
    _no_leftovers(tmp_path, "trace.oracleGeneral")


def test_generate_onto_a_missing_folder_is_one_line(cli, tmp_path):
    """12.9 with 12.3: the atomic writer's failure is one line, exit 2, no file left."""
    code, out, err = cli("policy", "generate", str(tmp_path / "no" / "such" / "t.jsonl"), "--duration", "10")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "internal error" not in err, err
