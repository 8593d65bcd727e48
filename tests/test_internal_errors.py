"""Issue 22 item 4: the last inputs that ended in "internal error" (or worse: a segmentation
fault) are one line and exit 2, or are read around; and a trace given as a pipe path
(`<(cat t.jsonl)`) reads like `-`.

Every case goes through `sitsprof.cli.main.main` in this process, as a user's command would.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROWS = [{"timestamp": 1000 * i, "input_length": 700 + i, "output_length": 5, "hash_ids": [0, 1 + i % 3]}
        for i in range(40)]


def _one_line_exit_2(result, *needles) -> str:
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert "internal error" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return lines[0]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _oracle(path, records):
    path.write_bytes(b"".join(struct.pack("<IQIq", *r) for r in records))
    return path


# -- a pipe path ---------------------------------------------------------------------------------
def _feed(path: str, data: bytes) -> threading.Thread:
    def write():
        with open(path, "wb") as out:
            out.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("extra", [[], ["--stream"]], ids=["whole", "stream"])
def test_a_pipe_path_reads_like_the_file(cli, tmp_path, extra):
    """22.8: `policy simulate <(cat t.jsonl)` was refused ("empty trace"): format detection read
    the pipe's head, and the reader found nothing left. A pipe is copied once, like `-`."""
    plain = _jsonl(tmp_path / "t.jsonl", ROWS)
    args = ["-p", "lru", "-c", "3", "--json", *extra]
    code, want, err = cli("policy", "simulate", str(plain), *args)
    assert code == 0, err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = _feed(str(fifo), plain.read_bytes())
    code, got, err = cli("policy", "simulate", str(fifo), *args)
    writer.join(5)
    assert code == 0, err
    strip = ("seconds", "path", "trace", "created_at", "tool_version", "command_line", "name")

    def plain_doc(text):
        def drop(obj):
            if isinstance(obj, dict):
                return {k: drop(v) for k, v in obj.items() if k not in strip}
            if isinstance(obj, list):
                return [drop(v) for v in obj]
            return obj
        return drop(json.loads(text))

    assert plain_doc(got) == plain_doc(want)


# -- the serving replay's arrays -----------------------------------------------------------------
@pytest.mark.parametrize("size", [2**31, 2**32 - 1, 513], ids=["2^31", "2^32-1", "513"])
def test_oracle_sizes_beyond_a_block_are_refused_before_the_kernel(cli, tmp_path, size):
    """22.4: an oracleGeneral obj_size beyond the trace's 512-token block made the re-blocking
    kernel write past its arrays (a segmentation fault, exit 139): refused, naming the request."""
    path = _oracle(tmp_path / "big.oracleGeneral", [(i, 2**64 - 1 - i, size, -1) for i in range(5)])
    for engine in ("vllm", "sglang"):
        _one_line_exit_2(cli("policy", "replay", str(path), "--engine", engine), "request 0", "512-token block")


def test_output_length_of_2_to_62_is_refused(cli, tmp_path):
    """22.4: a Mooncake output_length of 2^62 asked the re-blocking for 2^58 private blocks
    (MemoryError): refused in one line that names the request and the field."""
    rows = [dict(ROWS[0]), {**ROWS[1], "output_length": 2**62}]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    for engine in ("vllm", "sglang"):
        _one_line_exit_2(cli("policy", "replay", str(path), "--engine", engine), "request 1", "output_length")


def test_reblock_check_keeps_ordinary_traces(tmp_path):
    """The check refuses nothing a real trace holds: the bundled Mooncake re-blocks as before."""
    from sitsprof.policies.serving.reblock import reblock
    from sitsprof.policies.traces.detect import read_trace

    rb = reblock(read_trace("bundled:mooncake"), 16)
    assert rb.n_ids > 0 and len(rb.ids) == int(rb.offsets[-1])


# -- damaged run directories ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    from sitsprof.reports.synthetic import make_synthetic_run

    return make_synthetic_run(tmp_path_factory.mktemp("runs"), name="good", samples=2000).path


def _damage(run, kind, table, column, value, rows=slice(None)):
    path = run / f"{kind}s" / f"{table}.parquet"
    frame = pq.read_table(path).to_pandas()
    frame[column] = frame[column].astype(object)
    frame.loc[frame.index[rows], column] = value
    if isinstance(value, str):
        frame[column] = frame[column].astype(str)
    else:
        frame[column] = frame[column].astype("float64")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)


CASES = [
    ("probe", "latency", "latency_cycles", "abc"), ("probe", "latency", "latency_cycles", -5.0),
    ("probe", "latency", "latency_cycles", 0.0), ("probe", "latency", "footprint_bytes", -1.0),
    ("probe", "latency_cg", "latency_cycles", "abc"), ("probe", "tlb", "latency_cycles", "x"),
    ("probe", "loaded", "latency_cycles", "abc"), ("probe", "latency", "footprint_bytes", "abc"),
    ("probe", "tlb", "footprint_bytes", "abc"), ("probe", "latency", "latency_ns", "x"),
    ("probe", "bandwidth", "achieved_gbs", "x"), ("sampler", "nvml", "t_ns", "abc"),
    ("sampler", "gpm", "t_ns", "x"), ("sampler", "nvml", "sm_clock_mhz", "abc"),
]


@pytest.mark.parametrize("kind, table, column, value", CASES,
                         ids=[f"{t}.{c}={v!r}" for _, t, c, v in CASES])
def test_text_and_negative_numbers_in_run_tables(cli, good_run, tmp_path, kind, table, column, value):
    """22.4: text in a numeric column of a probe or sampler table (TypeError, ValueError deep in
    the analysis) is read as "no number": those rows are left out and counted in the notes;
    `report`, `calibrate` and `probe figures` answer (0) or refuse in one line (2)."""
    run = shutil.copytree(good_run, tmp_path / "run")
    _damage(run, kind, table, column, value)
    for args in (["report", str(run), "-o", str(tmp_path / "r.html")],
                 ["calibrate", str(run), "-o", str(tmp_path / "c.json")], ["probe", "figures", str(run)]):
        code, out, err = cli(*args)
        assert code in (0, 2), (args[0], code, err)
        assert "internal error" not in err and "Traceback" not in err, (args[0], err)
        assert len(err.strip().splitlines()) <= 1, (args[0], err)
    if isinstance(value, str):
        from sitsprof.reports.analysis import analyze_run

        assert any(f"values of {column} are not numbers" in note for note in analyze_run(run).notes)


@pytest.mark.parametrize("where", [("sm_clock_mhz",), ("device", "sm_clock_mhz")])
def test_sm_clock_that_is_text(cli, good_run, tmp_path, where):
    run = shutil.copytree(good_run, tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    node = meta
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = "abc"
    (run / "meta.json").write_text(json.dumps(meta))
    for args in (["report", str(run), "-o", str(tmp_path / "r.html")],
                 ["calibrate", str(run), "-o", str(tmp_path / "c.json")], ["probe", "figures", str(run)]):
        code, out, err = cli(*args)
        assert code in (0, 2) and "internal error" not in err and len(err.strip().splitlines()) <= 1, err


@pytest.mark.parametrize("name", [0, [1, {}], {"a": 1}])
def test_device_name_that_is_not_text(cli, good_run, tmp_path, name):
    """22.4 (found by tests/test_fuzz_properties.py at 1,000 cases): meta.json's device.name as
    a number or a list ended the report in TypeError (sorted/joined names; a set of them)."""
    run = shutil.copytree(good_run, tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    meta["device"]["name"] = name
    (run / "meta.json").write_text(json.dumps(meta))
    for args in (["report", str(run), "-o", str(tmp_path / "r.html")],
                 ["report", str(run), str(good_run), "-o", str(tmp_path / "f.html")],
                 ["calibrate", str(run), "-o", str(tmp_path / "c.json")], ["probe", "figures", str(run)]):
        code, out, err = cli(*args)
        assert code in (0, 2) and "internal error" not in err and len(err.strip().splitlines()) <= 1, err
