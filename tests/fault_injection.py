"""Fault injection: a user's bad day, replayed (issue 12, "Must show").

    python tests/fault_injection.py [--quick] [--seed N] [--json]

Five kinds of cases, all seeded (the same seed gives the same cases):

- kill: `sitsprof record` (through the fake NVML of tests/fake_nvml.py, as the tests run it)
  killed with SIGKILL, SIGTERM or SIGINT at a random moment, before, during or after the
  workload's end; the run directory must open, `inspect` must read it, every table in it must
  be readable, SIGINT/SIGTERM must leave it `interrupted` or `complete` (never `running`),
  and stderr must hold no traceback and no internal error.
- full disk: a small tmpfs (mounted when the machine allows it: root and `mount`; skipped
  with the reason otherwise), filled up, then `record`, `report`, `calibrate` and
  `policy generate` onto it: one line, exit 2, and any run directory left readable.
- corrupt run directories: a good run's Parquet files truncated at random offsets, emptied,
  replaced by garbage, deleted; parts whose schemas disagree; meta.json truncated, garbage,
  non-UTF-8, nested thousands deep, each field swapped for a value of a wrong type.
- fuzz traces: random bytes and mutated valid traces (bit flips, cut lines, values swapped
  for huge integers, NaN, strings, deep nesting) in each format.
- fuzz calibrations: random bytes and the shipped reference mutated the same way.

Every command a case runs must either succeed (exit 0; a `--json` document must then be
strict JSON) or fail with exactly one line on stderr and exit status 2, with no traceback and
no "internal error". The summary prints one line per kind; the exit status is 1 if any case
violated that, else 0. `--quick` is the bounded form tests/test_fault_injection.py runs.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "fakenvml" / "run_sitsprof.py"
sys.path.insert(0, str(HERE))

DEEP = "[" * 50_000 + "]" * 50_000


@dataclass
class Kind:
    """The cases of one kind: how many ran, which violated the rules, which were skipped."""

    name: str
    cases: int = 0
    violations: list[str] = field(default_factory=list)
    skipped: str | None = None
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


# -- running sitsprof ----------------------------------------------------------------------
def run_cli(*args: str) -> tuple[int, str, str]:
    """`sitsprof ARGS` in this process: (exit status, stdout, stderr)."""
    from sitsprof.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # main never raises; this would itself be a violation
            code = f"SystemExit({exc.code})"
        except BaseException as exc:  # noqa: BLE001 - reported as a violation
            code = f"raised {type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def _strict_json(text: str) -> str | None:
    def refuse(constant):
        raise ValueError(f"non-JSON constant {constant}")

    try:
        json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        return f"--json printed non-JSON: {exc}"
    return None


def verdict(code, out: str, err: str, json_out: bool = False) -> str | None:
    """None when the command obeyed the rules, else what it did wrong."""
    if "Traceback" in err or "internal error" in err:
        return f"exit {code}: {err.strip().splitlines()[-1][:200] if err.strip() else ''}"
    if code == 0:
        return _strict_json(out) if json_out else None
    if code != 2:
        return f"exit {code} (want 0 or 2): {err.strip()[:200]}"
    lines = err.strip().splitlines()
    if len(lines) != 1:
        return f"exit 2 with {len(lines)} lines on stderr: {err.strip()[:300]!r}"
    return None


def check(kind: Kind, label: str, *args: str, json_out: bool = False) -> tuple[int, str, str]:
    kind.cases += 1
    code, out, err = run_cli(*args)
    problem = verdict(code, out, err, json_out)
    kind.count("ok" if code == 0 else f"exit {code}")
    if problem:
        kind.violations.append(f"{label}: sitsprof {' '.join(a[-40:] for a in args)}: {problem}")
    return code, out, err


def check_run_readable(kind: Kind, label: str, path: Path, status_not_running: bool = False) -> None:
    """The run directory opens, `inspect` reads it, every table reads, and (after SIGINT or
    SIGTERM) it does not say `running`."""
    from sitsprof.collectors.rundir import inspect_run, open_run

    try:
        run = open_run(path)
        summary = inspect_run(path)
    except Exception as exc:  # noqa: BLE001 - any failure here is the violation
        kind.violations.append(f"{label}: {path}: unreadable: {type(exc).__name__}: {exc}")
        return
    for table, rows in summary["tables"].items():
        if isinstance(rows, str):
            kind.violations.append(f"{label}: {path}: table {table} {rows}")
    if summary.get("damaged"):
        kind.violations.append(f"{label}: {path}: damaged: {summary['damaged']}")
    if status_not_running and run.status == "running":
        kind.violations.append(f"{label}: {path}: still says `running` after the signal")
    kind.count(f"status {run.status}")
    code, _, err = run_cli("inspect", str(path))
    if code != 0 or err:
        kind.violations.append(f"{label}: sitsprof inspect {path}: exit {code}: {err.strip()[:200]}")


# -- kill at random moments -------------------------------------------------------------------
def _fake_env(base: Path) -> dict:
    import fake_nvml

    state = fake_nvml.write_state(base / "fake-nvml.json")
    return {**os.environ, fake_nvml.ENV: str(state), "SITSPROF_STATE_DIR": str(base / "state")}


def kill_trials(kind: Kind, rng: random.Random, trials: int, work: Path) -> list[Path]:
    """Returns the run directories the trials left (a recorded run's meta.json has more fields
    than a synthetic one's: corrupt_runs mutates those too)."""
    runs = []
    signals = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]
    for i in range(trials):
        base = work / f"kill-{i}"
        base.mkdir()
        env = _fake_env(base)
        signum = signals[i % 3]
        workload = rng.choice([0.2, 0.4, 0.8])
        delay = rng.uniform(0.0, workload + 0.4)  # before, around and after the workload's end
        if i % 6 == 4:  # within 5 ms of "recording into": while the workload is being started
            delay = rng.uniform(0.0, 0.005)
        lock = rng.random() < 0.3
        cmd = [sys.executable, str(RUNNER), "record", "--out", str(base / "runs"), "--name", "r", "--no-gpm",
               "--interval", "2ms", *(["--clocks", "lock", "--sm", "1500"] if lock else []),
               "--", "sleep", str(workload)]
        label = f"kill {i} ({signal.Signals(signum).name} {delay * 1000:.0f} ms into a {workload} s workload"
        label += ", clocks locked)" if lock else ")"
        kind.cases += 1
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        first = child.stderr.readline()
        if "recording into" not in first:
            child.kill()
            kind.violations.append(f"{label}: record did not start: {first}{child.stderr.read()[:300]}")
            continue
        time.sleep(delay)
        if child.poll() is None:
            child.send_signal(signum)
        try:
            _, err = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate()
            kind.violations.append(f"{label}: record still running 30 s after the signal")
        err = first + err
        if "Traceback" in err or "internal error" in err:
            kind.violations.append(f"{label}: stderr: {err.strip()[-300:]}")
        # 0: the run ended before the signal; 130/143: sitsprof's own statuses; -N: the signal
        # killed the interpreter after sitsprof had returned (the run is checked below either way)
        if child.returncode not in (0, 130, 143, -int(signum)):
            kind.violations.append(f"{label}: exit {child.returncode}: {err.strip()[-200:]}")
        kind.count(f"exit {child.returncode}")
        check_run_readable(kind, label, base / "runs" / "r", status_not_running=signum != signal.SIGKILL)
        runs.append(base / "runs" / "r")
        if lock:  # the documented recovery works whatever the kill left
            done = subprocess.run([sys.executable, str(RUNNER), "clocks", "reset"], capture_output=True,
                                  text=True, env=env, timeout=60)
            if done.returncode not in (0, 2) or "Traceback" in done.stderr or "internal error" in done.stderr:
                kind.violations.append(f"{label}: clocks reset: exit {done.returncode}: {done.stderr.strip()[-200:]}")
    return runs


# -- a full file system -----------------------------------------------------------------------
@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "2m"):
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield None, "needs root and mount(8) to mount a tmpfs"
        return
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        yield None, f"cannot mount a tmpfs here: {made.stderr.strip() or made.returncode}"
        return
    try:
        yield path, None
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system of `folder`, leaving about `leave` bytes."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize - leave
    with open(folder / "filler", "wb", buffering=0) as handle:
        try:
            while free > 0:
                handle.write(bytes(min(free, 1 << 16)))
                free -= 1 << 16
            while not leave:
                handle.write(bytes(4096))
        except OSError:
            pass


def full_disk(kind: Kind, work: Path, good_run: Path) -> None:
    with small_tmpfs(work / "tiny") as (mount, why):
        if mount is None:
            kind.skipped = why
            return
        env = _fake_env(work)
        for leave, label in ((0, "full"), (48 * 1024, "nearly full")):
            for p in mount.iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            _fill(mount, leave)
            kind.cases += 1
            done = subprocess.run([sys.executable, str(RUNNER), "record", "--out", str(mount / "runs"), "--name", "r",
                                   "--no-gpm", "--interval", "1ms", "--", "sleep", "0.5"],
                                  capture_output=True, text=True, env=env, timeout=60)
            problem = verdict(done.returncode, done.stdout, done.stderr.replace(
                f"sitsprof: recording into {mount / 'runs' / 'r'}\n", ""))
            kind.count(f"record onto {label}: exit {done.returncode}")
            if problem:
                kind.violations.append(f"record onto a {label} disk: {problem}")
            if (mount / "runs" / "r").exists():
                check_run_readable(kind, f"record onto a {label} disk", mount / "runs" / "r", status_not_running=True)
            check(kind, f"report onto a {label} disk", "report", str(good_run), "-o", str(mount / "report.html"))
            check(kind, f"calibrate onto a {label} disk", "calibrate", str(good_run), "-o", str(mount / "cal.json"))
            check(kind, f"generate onto a {label} disk", "policy", "generate", str(mount / "t.jsonl"),
                  "--duration", "600")


# -- corrupt run directories ------------------------------------------------------------------
def _truncate_at(rng):
    def apply(path: Path):
        data = path.read_bytes()
        path.write_bytes(data[: rng.randrange(0, max(1, len(data)))])
    return apply


def _garbage(rng):
    return lambda path: path.write_bytes(rng.randbytes(rng.randrange(0, 4096)))


def _flip(rng):
    def apply(path: Path):
        data = bytearray(path.read_bytes())
        for _ in range(rng.randrange(1, 8)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    return apply


WRONG_VALUES = ["", "x", 0, -1, 1.5, 2**70, 10**400, None, True, [], [1], {}, {"a": 1}, float("nan"), float("inf")]


def _json_text(value) -> str:
    if isinstance(value, int) and abs(value) > 2**64:
        return str(value)
    return json.dumps(value)


def meta_variants(meta: dict, rng: random.Random, n: int, cuts: int = 5,
                  whole_file: bool = True) -> list[tuple[str, str | bytes]]:
    """(label, meta.json content) pairs: damaged files (with `whole_file`), `cuts` truncations,
    and `n` with one field given a wrong value."""
    text = json.dumps(meta)
    out: list[tuple[str, str | bytes]] = [] if not whole_file else [
        ("meta.json empty", ""), ("meta.json a list", "[]"), ("meta.json nested", '{"schema_version": 1, "x": '
                                                              + DEEP + "}"),
        ("meta.json non-UTF-8", text.encode()[:20] + b"\xff\xfe" + text.encode()[20:]),
        ("meta.json garbage", rng.randbytes(300)),
    ]
    for cut in sorted(rng.sample(range(1, len(text)), min(cuts, len(text) - 1))):
        out.append((f"meta.json cut at {cut}", text[:cut]))
    keys = list(meta) + ["schema_version"] * 3
    for _ in range(n):
        key = rng.choice(keys)
        value = rng.choice(WRONG_VALUES)
        body = ", ".join(f"{json.dumps(k)}: {(_json_text(value) if k == key else json.dumps(v))}"
                         for k, v in meta.items())
        out.append((f"meta.json {key}={_json_text(value)[:20]}", "{" + body + "}"))
    return out


def corrupt_runs(kind: Kind, rng: random.Random, good_run: Path, work: Path, n_tables: int, n_meta: int,
                 cuts: int = 5, recorded: list[Path] = ()) -> None:
    files = sorted(p.relative_to(good_run) for p in good_run.rglob("*.parquet"))
    damages = [("truncated", _truncate_at), ("garbage", _garbage), ("bit flips", _flip),
               ("emptied", lambda rng: lambda p: p.write_bytes(b"")), ("deleted", lambda rng: lambda p: p.unlink())]
    cases = []
    for i in range(n_tables):
        rel = files[i % len(files)]
        name, make = damages[(i // len(files)) % len(damages)] if i < len(files) * len(damages) else rng.choice(damages)
        cases.append((f"{rel} {name}", lambda run, rel=rel, make=make: make(rng)(run / rel)))
    cases.append(("parts with mismatched schemas", _mismatched_parts))
    cases.append(("a garbage part", _garbage_part))
    meta = json.loads((good_run / "meta.json").read_text())
    for label, content in meta_variants(meta, rng, n_meta, cuts):
        def write(run, content=content):
            path = run / "meta.json"
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
        cases.append((label, write))
    bases = [good_run] * len(cases)
    for base in [r for r in recorded if (r / "meta.json").exists()][:1]:  # a `record` run's meta.json
        recorded_meta = json.loads((base / "meta.json").read_text())
        for label, content in meta_variants(recorded_meta, rng, max(2, n_meta // 2), cuts=0, whole_file=False):
            def write(run, content=content):
                path = run / "meta.json"
                path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
            cases.append((f"recorded run: {label}", write))
            bases.append(base)
    for i, ((label, damage), base) in enumerate(zip(cases, bases)):
        run = work / f"corrupt-{i}"
        shutil.copytree(base, run)
        damage(run)
        check(kind, label, "inspect", str(run))
        check(kind, label, "inspect", "--json", str(run), json_out=True)
        check(kind, label, "report", str(run), "-o", str(work / f"corrupt-{i}.html"))
        check(kind, label, "calibrate", str(run), "-o", str(work / f"corrupt-{i}.json"), "--allow-incomplete")
        shutil.rmtree(run)
        for output in (work / f"corrupt-{i}.html", work / f"corrupt-{i}.json"):
            output.unlink(missing_ok=True)


def _mismatched_parts(run: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = run / "samplers" / "extra.parts"
    parts.mkdir(parents=True)
    pq.write_table(pa.table({"t_ns": [1, 2], "x": [1.0, 2.0]}), parts / "part-00000.parquet")
    pq.write_table(pa.table({"t_ns": ["a", "b"], "x": ["u", "v"]}), parts / "part-00001.parquet")


def _garbage_part(run: Path) -> None:
    _mismatched_parts(run)
    (run / "samplers" / "extra.parts" / "part-00001.parquet").write_bytes(b"PAR1 and then nothing")


# -- fuzz traces and calibrations ---------------------------------------------------------------
def _mutate_json_value(rng: random.Random, obj):
    """`obj` with one leaf (or container) replaced by a wrong or extreme value."""
    def leaves(node, path=()):
        yield path
        if isinstance(node, dict):
            for k, v in node.items():
                yield from leaves(v, path + (k,))
        elif isinstance(node, list):
            for i, v in enumerate(node[:20]):
                yield from leaves(v, path + (i,))

    paths = [p for p in leaves(obj) if p]
    if not paths:
        return rng.choice(WRONG_VALUES)
    path = rng.choice(paths)
    value = rng.choice(WRONG_VALUES + [5e-324, 1.7e308, -1e308, 1e-308, "DEEP"])
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


def _dump(obj) -> str:
    text = json.dumps(obj)  # NaN/Infinity as Python writes them: what a careless tool writes too
    text = text.replace('"DEEP"', DEEP)
    return text.replace("1e+400", "1" + "0" * 400)


def _fuzz_bytes(rng: random.Random, data: bytes) -> bytes:
    how = rng.randrange(5)
    data = bytearray(data)
    if how == 0:
        return rng.randbytes(rng.randrange(1, 2048))
    if how == 1:  # bit flips
        for _ in range(rng.randrange(1, 16)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if how == 2:  # cut
        return bytes(data[: rng.randrange(0, len(data) + 1)])
    if how == 3:  # insert random bytes
        at = rng.randrange(len(data) + 1)
        return bytes(data[:at]) + rng.randbytes(rng.randrange(1, 64)) + bytes(data[at:])
    # duplicate a slice
    a = rng.randrange(len(data) + 1)
    b = min(len(data), a + rng.randrange(1, 200))
    return bytes(data[:b]) + bytes(data[a:b]) + bytes(data[b:])


def _seed_traces(work: Path) -> dict[str, Path]:
    from sitsprof.policies.traces import csvfile, generator, oracle

    requests = generator.generate_requests(seed=1, duration_s=20)
    trace = generator.requests_to_trace(requests)
    paths = {"mooncake": work / "seed.jsonl", "requests": work / "seed-requests.jsonl",
             "csv": work / "seed.csv", "oracle": work / "seed.oracleGeneral"}
    generator.write_mooncake_jsonl(requests, paths["mooncake"])
    generator.write_requests_jsonl(requests, paths["requests"])
    csvfile.write_csv(paths["csv"], trace)
    oracle.write_oracle_general(paths["oracle"], trace.original_id, timestamps=trace.time.astype("int64"),
                                sizes=trace.tokens)
    for path in paths.values():  # a few hundred lines are enough to fuzz, and fast to replay
        data = path.read_bytes()
        path.write_bytes(data[: 24 * 400] if path.suffix == ".oracleGeneral" else b"".join(data.splitlines(True)[:300]))
    return paths


def fuzz_traces(kind: Kind, rng: random.Random, work: Path, n: int) -> None:
    seeds = _seed_traces(work)
    formats = sorted(seeds)
    for i in range(n):
        fmt = formats[i % len(formats)]
        seed = seeds[fmt]
        path = work / f"fuzz-{i}{''.join(seed.suffixes)}"
        if fmt in ("mooncake", "requests") and rng.random() < 0.5:  # a line with a wrong value
            lines = seed.read_text().splitlines()
            at = rng.randrange(len(lines))
            lines[at] = _dump(_mutate_json_value(rng, json.loads(lines[at])))
            path.write_text("\n".join(lines) + "\n")
            label = f"{fmt} trace, line {at + 1} mutated"
        else:
            path.write_bytes(_fuzz_bytes(rng, seed.read_bytes()))
            label = f"{fmt} trace, bytes fuzzed"
        args = ["policy", "simulate", str(path), "-c", "10", "-p", "lru,sits", "--json"]
        if rng.random() < 0.3:
            args.append("--skip-bad-lines")
        check(kind, label, *args, json_out=True)
        path.unlink()


def fuzz_calibrations(kind: Kind, rng: random.Random, work: Path, n: int) -> None:
    from sitsprof.calibration import reference_path
    from sitsprof.policies.traces import generator

    trace = work / "cal-trace.jsonl"
    generator.write_mooncake_jsonl(generator.generate_requests(seed=2, duration_s=5), trace)
    reference = reference_path().read_text()
    for i in range(n):
        path = work / f"cal-{i}.json"
        if rng.random() < 0.6:
            obj = json.loads(reference)
            for _ in range(rng.randrange(1, 3)):
                obj = _mutate_json_value(rng, obj)
            path.write_text(_dump(obj))
            label = "calibration with a wrong value"
        else:
            path.write_bytes(_fuzz_bytes(rng, reference.encode()))
            label = "calibration, bytes fuzzed"
        check(kind, label, "policy", "simulate", str(trace), "-c", "20", "-p", "lru", "--json",
              "--calibration", str(path), json_out=True)
        path.unlink()


# -- the whole thing --------------------------------------------------------------------------
SIZES = {  # kill trials, table corruptions, meta.json variants, meta.json cuts, trace and calibration fuzz cases
    "quick": (3, 5, 3, 1, 60, 60),
    "full": (54, 60, 120, 10, 300, 300),
}


def run_all(quick: bool, seed: int, only: set[str] | None = None, sizes: tuple | None = None) -> list[Kind]:
    import warnings

    warnings.simplefilter("default")  # a RuntimeWarning on stderr is a line too
    from sitsprof.reports.synthetic import make_synthetic_run

    kills, tables, metas, cuts, traces, cals = sizes or SIZES["quick" if quick else "full"]
    rng = random.Random(seed)
    kinds = {name: Kind(name) for name in ("kill", "full disk", "corrupt run directories", "fuzz traces",
                                           "fuzz calibrations")}
    with tempfile.TemporaryDirectory(prefix="sitsprof-faults-") as tmp:
        work = Path(tmp)
        recorded: list[Path] = []
        good = _small_good_run(make_synthetic_run(work, name="good", samples=2000).path)
        steps = [
            ("kill", lambda k: recorded.extend(kill_trials(k, rng, kills, work))),
            ("full disk", lambda k: full_disk(k, work, good)),
            ("corrupt run directories", lambda k: corrupt_runs(k, rng, good, work, tables, metas, cuts, recorded)),
            ("fuzz traces", lambda k: fuzz_traces(k, rng, work, traces)),
            ("fuzz calibrations", lambda k: fuzz_calibrations(k, rng, work, cals)),
        ]
        for name, step in steps:
            if only and name not in only:
                kinds[name].skipped = "not selected"
                continue
            started = time.monotonic()
            step(kinds[name])
            kinds[name].outcomes["seconds"] = round(time.monotonic() - started, 1)
    return list(kinds.values())


def _small_good_run(path: Path, rows: int = 300) -> Path:
    """The synthetic run with its sampler tables cut to `rows` rows (still a complete, valid run;
    a report of it takes a fraction of the time, so more corruptions fit in the same minute)."""
    import pyarrow.parquet as pq

    meta = json.loads((path / "meta.json").read_text())
    for table in sorted((path / "samplers").glob("*.parquet")):
        pq.write_table(pq.read_table(table).slice(0, rows), table)
        entry = meta.get("tables", {}).get("samplers", {}).get(table.stem)
        if isinstance(entry, dict):
            entry["rows"] = min(entry.get("rows", rows), rows)
    (path / "meta.json").write_text(json.dumps(meta, indent=2))
    return path


def summary_lines(kinds: list[Kind]) -> list[str]:
    lines = []
    for kind in kinds:
        if kind.skipped:
            lines.append(f"{kind.name:24s} skipped: {kind.skipped}")
            continue
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(kind.outcomes.items()))
        lines.append(f"{kind.name:24s} {kind.cases:4d} cases, {len(kind.violations)} violations ({outcomes})")
        lines.extend(f"    VIOLATION {v}" for v in kind.violations[:20])
        if len(kind.violations) > 20:
            lines.append(f"    ... and {len(kind.violations) - 20} more")
    total = sum(len(k.violations) for k in kinds)
    cases = sum(k.cases for k in kinds)
    lines.append(f"{cases} cases: " + ("every run directory readable, every bad input one line with exit 2, "
                                       "no traceback, no internal error" if not total else f"{total} VIOLATIONS"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the bounded form CI runs (well under a minute)")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--only", default=None, help="comma-separated kinds (kill, full disk, ...)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    kinds = run_all(args.quick, args.seed, only)
    if args.json:
        print(json.dumps([kind.__dict__ for kind in kinds], indent=2))
    else:
        print("\n".join(summary_lines(kinds)))
    return 1 if any(kind.violations for kind in kinds) else 0


if __name__ == "__main__":
    sys.exit(main())
