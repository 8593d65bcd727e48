"""Results people can trust and compare (issue 13): commands that agree with each other.

- `report --policy-results` reads `policy simulate --json`'s own output fully;
- policy parameters and capacities are range-checked at every entry point;
- synthetic data is never shown as measured (calibrate, --calibration, probe figures);
- one grammar for policy names and durations, `--debug` anywhere, `run` and `probe` share
  defaults, `policy list --json`, a verdict column in `policy claims`, flat `--csv` with event
  logs elsewhere, the tokens/s figure named for what it is;
- `run --dry-run` without a GPU says it planned for an assumed H200, at the `--device` asked.
"""
from __future__ import annotations

import csv
import io
import json

import click
import pytest

from sitsprof.cli import main as main_module
from sitsprof.policies.errors import CapacityError, PolicyEngineError, UnknownPolicyError
from sitsprof.policies.traces.generator import generate_requests, requests_to_trace, write_mooncake_jsonl


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("consistency") / "small.jsonl"
    write_mooncake_jsonl(generate_requests(seed=4, duration_s=300), path)
    return path


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    from sitsprof.reports.synthetic import make_synthetic_run

    return make_synthetic_run(tmp_path_factory.mktemp("synthetic"), "syn", samples=20_000).path


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sitsprof: error: "), err
    return lines[0]


# --- report --policy-results reads policy simulate --json --------------------------------------


def test_report_reads_simulate_json_fully(cli, small_trace, tmp_path):
    from sitsprof.policies.engine.results import read_results
    from sitsprof.reports.policy_report import policy_section

    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru,sits", "-c", "1%,10%,50%", "--json")
    assert code == 0, err
    path = tmp_path / "sim.json"
    path.write_text(out)
    doc = json.loads(out)
    section = policy_section(read_results(path), str(path))
    # the P99 column: every row's estimate, the one the cost model put in extra.cost
    table = section.tables[0]
    p99 = table.columns.index("P99 estimate (ms)")
    want = [r["extra"]["cost"]["ttft_p99_ms"] for r in doc["results"]]
    assert [row[p99] for row in table.rows] == want and all(v > 0 for v in want)
    titles = [f.title for f in section.figures]
    assert "P99 estimate per capacity" in titles
    # the SITS timeline: the middle capacity's decisions, one point per controller window
    assert "SITS decision timeline" in titles
    timeline = next(f for f in section.figures if f.title == "SITS decision timeline")
    sits = [r for r in doc["results"] if r["policy"] == "sits"]
    decisions = [e for e in sits[1]["extra"]["events"] if e["event"] == "decision"]
    assert decisions and timeline.data[0]["x"] == [e["time"] for e in decisions]
    assert f"at capacity {sits[1]['capacity']:,} blocks" in timeline.caption


# --- parameters and capacities are range-checked --------------------------------------------------


@pytest.mark.parametrize("args, needles", [
    (["-p", "lirs", "-P", "hir_ratio=1"], ["hir_ratio=1", "0 < hir_ratio < 1", "nothing hits"]),
    (["-p", "lirs", "-P", "hir_ratio=-1"], ["hir_ratio=-1", "0 < hir_ratio < 1"]),
    (["-p", "sits", "-P", "memory=-1"], ["memory=-1", "0 <= memory <= 1", "decay"]),
    (["-p", "semantic-shard", "-P", "memory=2"], ["memory=2", "0 <= memory <= 1"]),
    (["-p", "s3fifo", "-P", "small_ratio=0"], ["small_ratio=0", "0 < small_ratio < 1"]),
    (["-p", "2q", "-P", "ain_ratio=1"], ["ain_ratio=1", "0 < ain_ratio < 1"]),
    (["-p", "sits", "-P", "window_s=0"], ["window_s=0", "window_s > 0"]),
    (["-p", "sits", "--window", "0"], ["--window", "positive"]),
    (["-p", "semantic-shard", "--ttl", "0"], ["--ttl", "positive"]),
    (["-p", "sits", "-P", "initial=lfu"], ["initial=lfu", "one of"]),
    (["-p", "lru", "-c", "0%"], ["'0%'", "0% < capacity <= 100%", "at least one block"]),
    (["-p", "lru", "-c", "200%"], ["'200%'", "0% < capacity <= 100%", "give a percentage"]),
])
def test_out_of_range_values_are_one_line_exit_2(cli, small_trace, args, needles):
    code, out, err = cli("policy", "simulate", str(small_trace), "--csv", *args)
    assert code == 2 and out == ""
    line = one_error_line(err)
    for needle in needles:
        assert needle in line, line


def test_in_range_values_replay(cli, small_trace):
    code, out, err = cli("policy", "simulate", str(small_trace), "--csv", "-p", "lirs", "-c", "100%",
                         "-P", "hir_ratio=0.5")
    assert code == 0, err
    assert len(list(csv.DictReader(io.StringIO(out)))) == 1


def test_every_entry_point_checks_ranges(small_trace):
    from sitsprof.policies.sweep import simulate, simulate_costed

    trace = requests_to_trace(generate_requests(seed=1, duration_s=120))
    with pytest.raises(PolicyEngineError, match="hir_ratio=1 of lirs is out of range"):
        simulate(trace, "lirs", 100, hir_ratio=1.0)
    with pytest.raises(PolicyEngineError, match="memory=-1 of sits is out of range"):
        simulate_costed(trace, "sits", 100, memory=-1.0)
    assert simulate(trace, "lirs", 100, hir_ratio=0.5).hits > 0


def test_every_parameter_declares_a_range_its_default_is_in():
    from sitsprof.policies.engine.params import accepted, kernel_params, ranges
    from sitsprof.policies.registry import POLICIES

    for name, module in POLICIES.items():
        declared = ranges(module)
        for pname, default in {**kernel_params(module), **accepted(module)}.items():
            if isinstance(default, bool) or pname == "embedder":  # flags; the embedder is a spec string
                continue
            assert pname in declared, f"{name}: parameter {pname} declares no range (PARAM_RANGES)"
            if pname in accepted(module):
                assert declared[pname].allows(default), f"{name}: default {pname}={default!r} outside its range"
            assert declared[pname].why, f"{name}: {pname}'s range says not why"


def test_capacity_percentages_are_within_the_trace():
    from sitsprof.policies.engine.capacity import parse_capacities

    assert parse_capacities("100%,50%,1k", 1000) == [1000, 500]
    assert parse_capacities("5000", 1000) == [5000]  # a block count past the trace is a real cache
    for text in ("0%", "200%", "100.5%"):
        with pytest.raises(CapacityError, match="0% < capacity <= 100%"):
            parse_capacities(text, 1000)


# --- synthetic data is never shown as measured -------------------------------------------------


def test_calibrate_on_a_synthetic_run_is_not_measured(cli, synthetic_run, tmp_path):
    from sitsprof.calibration import load_calibration

    code, out, err = cli("calibrate", str(synthetic_run), "-o", str(tmp_path / "cal.json"))
    assert code == 0, err
    cal = load_calibration(tmp_path / "cal.json")
    assert cal["measured"] is False and cal["synthetic"] is True
    assert cal["provenance"]["kind"] == "synthetic" and cal["name"].startswith("synthetic-")
    assert "SYNTHETIC" in cal["label"] and "SYNTHETIC" in err


def test_a_synthetic_calibration_claiming_measured_is_refused(cli, synthetic_run, tmp_path):
    from sitsprof.calibration import CalibrationError, validate_calibration
    from sitsprof.reports.fromrun import calibration_from_run

    cal = calibration_from_run(synthetic_run)
    old = json.loads(json.dumps(cal))
    old["measured"], old["provenance"]["kind"] = True, "measured"  # what calibrate wrote before
    with pytest.raises(CalibrationError, match="provenance.kind"):
        validate_calibration(old)
    del old["synthetic"]
    old["provenance"]["kind"] = "synthetic"
    with pytest.raises(CalibrationError, match="^measured"):
        validate_calibration(old)


def test_simulate_with_a_synthetic_calibration_says_synthetic(cli, synthetic_run, small_trace, tmp_path):
    assert cli("calibrate", str(synthetic_run), "-o", str(tmp_path / "cal.json"))[0] == 0
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "10%",
                         "--calibration", str(tmp_path / "cal.json"))
    assert code == 0, err
    assert "SYNTHETIC" in out and "not a measurement" in out
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "10%", "--json",
                         "--calibration", str(tmp_path / "cal.json"))
    assert json.loads(out)["results"][0]["extra"]["cost"]["calibration_kind"] == "synthetic"
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "10%")
    assert "hopper-published (published figures, not measured)" in out and "SYNTHETIC" not in out


def test_probe_figures_on_a_synthetic_run_never_say_measured(cli, synthetic_run):
    code, out, err = cli("probe", "figures", str(synthetic_run))
    assert code == 0, err
    assert "SYNTHETIC" in out.splitlines()[0]
    assert "measured" not in out.replace("not a measurement", "")


# --- one grammar: names, durations, --debug -----------------------------------------------------


@pytest.mark.parametrize("spelling, name", [
    ("prefix_lru", "prefix_lru"), ("prefix-lru", "prefix_lru"), ("PREFIX-LRU", "prefix_lru"),
    ("twoq", "2q"), ("2q", "2q"), ("semantic_shard", "semantic-shard"), ("s3-fifo", "s3fifo"),
])
def test_policy_names_in_either_spelling(spelling, name):
    from sitsprof.policies.registry import get_policy, select_policies

    assert name == get_policy(spelling).NAME
    assert select_policies(f"lru,{spelling}") == ["lru", name]


def test_policy_name_spellings_on_the_command_line(cli, small_trace):
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "prefix-lru,twoq", "-c", "100", "--csv")
    assert code == 0, err
    assert [r["policy"] for r in csv.DictReader(io.StringIO(out))] == ["prefix_lru", "2q"]
    with pytest.raises(UnknownPolicyError, match="choose from"):
        from sitsprof.policies.registry import get_policy

        get_policy("threeq")


def _all_options(command, path=("sitsprof",)):
    for param in command.params:
        if isinstance(param, click.Option):
            yield " ".join(path), param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _all_options(sub, (*path, name))


def test_every_time_option_takes_the_one_duration_grammar():
    from sitsprof.cli.options import Duration

    # (--threshold-windows is a count; --throttle-ns names its unit and takes whole nanoseconds)
    timed = [(where, p) for where, p in _all_options(main_module.cli)
             if any(word in p.name for word in ("duration", "ttl", "window", "interval", "timeout"))
             and p.name not in ("threshold_windows", "throttle_ns")]
    names = {f"{where} {p.opts[0]}" for where, p in timed}
    assert {"sitsprof record --duration", "sitsprof record --cupti-interval", "sitsprof policy simulate --window",
            "sitsprof policy simulate --ttl", "sitsprof policy generate --duration", "sitsprof demo --duration",
            "sitsprof policy serve-metrics --duration", "sitsprof record --interval"} <= names
    for where, p in timed:
        assert isinstance(p.type, Duration), f"{where} {p.opts[0]} does not read durations with the one grammar"


def test_durations_read_alike(cli, tmp_path):
    outs = []
    for text in ("180", "180s", "3m"):
        code, out, err = cli("policy", "generate", str(tmp_path / f"g{len(outs)}.jsonl"), "--duration", text)
        assert code == 0, err
        outs.append(out.split(":", 1)[1])
    assert outs[0] == outs[1] == outs[2]
    code, out, err = cli("policy", "generate", str(tmp_path / "x.jsonl"), "--duration", "3 fortnights")
    assert code == 2 and "--duration" in one_error_line(err) and "3m" in err


def test_debug_after_the_subcommand_shows_the_traceback(cli, small_trace):
    @click.command("boom", context_settings={"allow_interspersed_args": False})
    @click.argument("rest", nargs=-1, type=click.UNPROCESSED)
    def boom(rest) -> None:
        raise KeyError(" ".join(rest) or "oops")

    main_module.cli.add_command(boom)
    try:
        assert main_module.main(["boom"]) == 1
        with pytest.raises(KeyError):
            main_module.main(["boom", "--debug"])
        with pytest.raises(KeyError):
            main_module.main(["--debug", "boom"])
        # after `--`, --debug belongs to the command's own arguments
        assert main_module.main(["boom", "--", "workload", "--debug"]) == 1
    finally:
        main_module.cli.commands.pop("boom")
    code, out, err = cli("policy", "simulate", str(small_trace / "absent"), "--csv")
    assert code == 2
    with pytest.raises(PolicyEngineError):
        main_module.main(["policy", "simulate", str(small_trace / "absent"), "--debug"])


def test_run_and_probe_share_their_defaults(no_gpu_cli):
    run = {p.name: p for p in main_module.cli.commands["run"].params}
    probe = main_module.cli.commands["probe"]
    shared = {"suite", "clocks", "index", "parent", "name", "dry_run", "gpm"}
    for part, command in probe.commands.items():
        if part == "figures":
            continue
        params = {p.name: p for p in command.params}
        for name in shared:
            assert params[name].default == run[name].default, (part, name)
            assert params[name].help == run[name].help, (part, name)
    code, out, err = no_gpu_cli("probe", "latency", "--dry-run")
    assert code == 0 and err.startswith("quick suite"), err  # the same suite `run` plans by default
    code, out, err = no_gpu_cli("probe", "latency", "--dry-run", "--quick")
    assert code == 0 and err.startswith("quick suite")
    code, out, err = no_gpu_cli("probe", "latency", "--dry-run", "--suite", "full")
    assert code == 0 and err.startswith("full suite")


# --- policy list --json, claims verdicts, flat CSV ---------------------------------------------


def test_policy_list_json(cli):
    from sitsprof.policies.registry import policy_names

    code, out, err = cli("policy", "list", "--json")
    assert code == 0, err
    catalog = json.loads(out)
    assert [p["name"] for p in catalog] == policy_names()
    by = {p["name"]: p for p in catalog}
    assert "twoq" in by["2q"]["aliases"] and "prefix-lru" in by["prefix_lru"]["aliases"]
    hir = by["lirs"]["parameters"][0]
    assert hir == {"name": "hir_ratio", "default": 0.01, "range": "0 < hir_ratio < 1", "why": hir["why"]}
    assert by["sits"]["kind"] == "adaptive" and by["lru"]["kind"] == "classic"


def test_claim_verdicts_compare_the_measured_numbers():
    from sitsprof.policies.claims import CLAIMS, verdicts

    rows = [{"policy": "lirs", "capacity": 10, "block_hit_ratio": 0.6, "ttft_p95_ms": 400.0, "tokens_per_s": 2.0},
            {"policy": "lru", "capacity": 10, "block_hit_ratio": 0.5, "ttft_p95_ms": 500.0, "tokens_per_s": 1.5},
            {"policy": "lirs", "capacity": 20, "block_hit_ratio": 0.6, "ttft_p95_ms": 600.0, "tokens_per_s": None},
            {"policy": "lru", "capacity": 20, "block_hit_ratio": 0.7, "ttft_p95_ms": 500.0, "tokens_per_s": None}]
    got = verdicts(CLAIMS[1], rows)
    assert [v["verdict"] for v in got] == ["holds", "does not hold"]
    assert "block hit lirs 0.6000 > lru 0.5000" in got[0]["summary"]
    assert "lirs 0.6000 < lru 0.7000 (claimed higher)" in got[1]["summary"]
    assert "tok/s, 1 stream: not measured" in got[1]["summary"]
    assert verdicts(CLAIMS[1], [{"policy": "lirs", "capacity": 1, "block_hit_ratio": None}])[0]["verdict"] == \
        "not measured"


def test_claims_print_a_verdict_column(cli, monkeypatch):
    import sitsprof.policies.claims as claims

    rows = [{"policy": p, "capacity": 100, "block_hit_ratio": h, "prefix_hit_ratio": h, "ttft_p95_ms": 1.0,
             "ttft_p99_ms": 2.0, "tokens_per_s": 3.0, "stack_hit_ratio": {}, "calibration": "hopper-published",
             "calibration_kind": "published"} for p, h in (("lru", 0.2), ("prefix_lru", 0.4), ("semantic-shard", 0.6))]
    doc = [{"workload": "three-stack", "blocks": 1000, "claim": claims.CLAIMS[0].text, "rows": rows,
            "verdicts": claims.verdicts(claims.CLAIMS[0], rows)}]
    monkeypatch.setattr(claims, "run_claims", lambda **kwargs: doc)
    code, out, err = cli("policy", "claims")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "policy" in line and "capacity" in line)
    assert header.rstrip().endswith("verdict")
    assert "holds" in out and "semantic-shard 0.6000 > prefix_lru 0.4000" in out
    assert "published figures, not measured" in out


def test_csv_is_flat_and_events_go_to_their_own_file(cli, small_trace, tmp_path):
    events = tmp_path / "events.jsonl"
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru,sits", "-c", "10%", "--csv",
                         "--events", str(events))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["policy"] for r in rows] == ["lru", "sits"]
    for column in ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tokens_per_s_one_stream", "ctcci", "calibration"):
        assert column in rows[0], column
    assert float(rows[0]["ttft_p99_ms"]) > 0 and float(rows[1]["tokens_per_s_one_stream"]) > 0
    assert "extra" not in rows[0] and "events" not in rows[0]
    for row in rows:
        assert not any(v.startswith(("{", "[")) for v in row.values() if v), row  # no JSON in a cell
    assert rows[1]["switches"] != "" and rows[1]["behaviour_share.recency"] != ""
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert lines and all(e["policy"] == "sits" and e["capacity"] == int(rows[1]["capacity"]) for e in lines)
    assert {e["event"] for e in lines} >= {"decision"}


def test_tokens_per_s_says_what_it_is(cli, small_trace):
    code, out, err = cli("policy", "simulate", str(small_trace), "-p", "lru", "-c", "10%")
    assert code == 0, err
    assert "tok/s, 1 stream" in out and "one request stream" in out
    code, out, err = cli("policy", "simulate", "--help")
    assert "no queueing" in out and "tokens_per_s_one_stream" in out


# --- run --dry-run without a GPU ------------------------------------------------------------------


@pytest.fixture
def no_gpu_cli(monkeypatch, capsys):
    from sitsprof.pmu.errors import NoGpuError
    from sitsprof.probes import gpu

    def absent(index=0):
        raise NoGpuError("no usable NVIDIA GPU/driver for CuPy (test)")

    monkeypatch.setattr(gpu, "device_limits", absent)
    monkeypatch.setattr(gpu, "import_cupy", absent)

    def run(*args):
        code = main_module.main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_dry_run_says_the_device_was_assumed_and_honours_device(no_gpu_cli, tmp_path):
    code, out, err = no_gpu_cli("run", "--dry-run", "--device", "3", "--out", str(tmp_path))
    assert code == 0, err
    assert "GPU 3 (NVIDIA H200 (assumed: no GPU visible)" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dry run: planned for an assumed H200 as GPU 3 (no GPU found")
    assert "all checks passed" in last
    assert list(tmp_path.iterdir()) == []


def test_dry_run_with_gpus_refuses_a_device_that_is_not_one(monkeypatch, cli, tmp_path):
    from sitsprof.pmu.errors import NoGpuError
    from sitsprof.probes import gpu
    from sitsprof.probes.plan import DeviceLimits

    h100 = DeviceLimits(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), sm_count=132,
                        l2_bytes=50 << 20, memory_bytes=80 << 30, free_bytes=79 << 30)

    def limits(index=0):
        if index != 0:
            raise NoGpuError(f"there is no GPU {index}; CuPy sees 1")
        return h100

    monkeypatch.setattr(gpu, "device_limits", limits)
    monkeypatch.setattr(gpu, "import_cupy", lambda: object())  # a GPU is visible
    code, out, err = cli("run", "--dry-run", "--device", "1", "--out", str(tmp_path))
    assert code == 2 and "there is no GPU 1" in one_error_line(err)
    code, out, err = cli("run", "--dry-run", "--out", str(tmp_path))
    assert code == 0 and err.strip().splitlines()[-1] == (
        "dry run: all checks passed on GPU 0 (NVIDIA H100 80GB HBM3, compute capability 9.0); nothing launched")
    code, out, err = cli("run", "--dry-run", "--device", "-1", "--out", str(tmp_path))
    assert code == 2 and "--device" in one_error_line(err)


@pytest.mark.parametrize("text, ms", [("2000", 2000.0), ("2s", 2000.0), ("100ms", 100.0), ("0.5", 0.5),
                                      ("1.5min", 90_000.0)])
def test_slo_targets_take_ms_or_a_duration(text, ms):
    """--slo-ttft-p99 2s (the issue's spelling) and 2000 (vLLM's goodput spelling) are one target."""
    from sitsprof.cli.options import MILLISECONDS

    assert MILLISECONDS.convert(text, None, None) == ms


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "abc", "2 parsecs", "0ms"])
def test_slo_targets_refuse_what_is_not_a_positive_time(text):
    from sitsprof.cli.options import MILLISECONDS

    with pytest.raises(click.BadParameter, match="positive number of milliseconds"):
        MILLISECONDS.convert(text, None, None)
