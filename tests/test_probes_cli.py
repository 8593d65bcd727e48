"""`sitsprof probe ...` / `sitsprof run`: dry runs, refusals before launch, and the suite's
run directory written from a stand-in for the GPU launchers (recorded-shape arrays)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sitsprof.cli.main import main
from sitsprof.common.sizes import GiB, MiB
from sitsprof.pmu.errors import NoGpuError
from sitsprof.probes import gpu
from sitsprof.probes import tables as A
from sitsprof.probes.plan import DeviceLimits
from sitsprof.probes.suite import make_suite, run_suite

DOC = Path(__file__).resolve().parent.parent / "docs" / "run-directory.md"
A100 = DeviceLimits(name="NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), sm_count=108, l2_bytes=40 * MiB,
                    memory_bytes=80 * GiB, free_bytes=79 * GiB)
H100 = DeviceLimits(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0), sm_count=132, l2_bytes=50 * MiB,
                    memory_bytes=80 * GiB, free_bytes=79 * GiB)


@pytest.fixture
def no_gpu(monkeypatch):
    def absent(index=0):
        raise NoGpuError("no usable NVIDIA GPU/driver for CuPy (test); run the probes on a machine with one")

    monkeypatch.setattr(gpu, "device_limits", absent)
    monkeypatch.setattr(gpu, "import_cupy", absent)


@pytest.fixture
def fake_device(monkeypatch):
    def use(limits):
        monkeypatch.setattr(gpu, "device_limits", lambda index=0: limits)

    return use


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dry_run_without_gpu_plans_against_a_nominal_h200(no_gpu, capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--dry-run", "--out", str(tmp_path))
    assert code == 0
    assert "assumed: no GPU visible" in err and "dry run: planned for an assumed H200" in err
    assert "all checks passed" in err
    for part in ("latency:", "tlb:", "bandwidth:", "loaded:"):
        assert part in err
    assert list(tmp_path.iterdir()) == []


def test_without_gpu_one_line_and_status_2(no_gpu, capsys, tmp_path):
    code, out, err = run_cli(capsys, "probe", "latency", "--quick", "--out", str(tmp_path))
    assert code == 2
    assert err.strip().count("\n") == 0 and err.startswith("sitsprof: error: no usable NVIDIA GPU")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,message", [
    (("probe", "latency", "--max-footprint", "400GiB"), r"needs \d+ GiB of device memory but GPU 0 .* has 79 GiB free"),
    (("probe", "bandwidth", "--sms", "200"), r"200 SMs asked for, but GPU 0 .* has 132 SMs"),
    (("probe", "loaded", "--sms", "133"), r"saturator: 133 SMs asked for"),
    (("probe", "loaded", "--levels", "1"), r"--levels must be at least 2"),
    (("probe", "bandwidth", "--blocks-per-sm", "100"), r"100 blocks per SM is beyond the 32"),
    (("probe", "tlb", "--strides", "2MiB,3parsecs"), r"cannot read size '3parsecs'"),
    (("run", "--parts", "latency,bogus"), r"unknown probe\(s\) bogus"),
])
def test_bad_input_is_refused_before_anything_runs(fake_device, capsys, tmp_path, args, message):
    fake_device(H100)
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path))
    assert code == 2, err
    assert re.search(message, err), err
    assert list(tmp_path.iterdir()) == []  # no run directory made


def test_hopper_only_counters_on_another_gpu(fake_device, capsys, tmp_path):
    fake_device(A100)
    code, out, err = run_cli(capsys, "run", "--gpm", "on", "--out", str(tmp_path))
    assert code == 2 and "needs a Hopper GPU" in err and "A100" in err
    fake_device(A100)
    code, out, err = run_cli(capsys, "run", "--dry-run", "--out", str(tmp_path))
    assert code == 0, err  # without --gpm on, the probes themselves run on an A100


class FakeProbes:
    """Stands in for gpu.Probes: returns frames shaped like the real launchers', from models."""

    def __init__(self, limits):
        self.limits = limits
        self.rng = np.random.default_rng(0)
        self.mhz = 1980.0

    def calibrate(self, spin_ns, samples):
        return {"sm_clock_mhz": self.mhz, "timer_overhead_cycles": 6.0, "timer_overhead": {"median": 6.0}}

    def _level(self, fp):
        return 32 if fp <= 128 * 1024 else 280 if fp <= 24 * MiB else 510 if fp <= 50 * MiB else 650

    def clock(self):
        """A chase's clock-window columns as the launchers write them (tables.clock_columns)."""
        return A.clock_columns([10**9, 10**9 + 10**6, 0, int(self.mhz * 1e3)], self.mhz)

    def latency(self, plan, progress):
        out = {}
        for v, name in (("ca", "latency"), ("cg", "latency_cg")):
            frames = [A.chase_frame((self._level(fp) if v == "ca" or fp > 24 * MiB else 280) + 6
                                    + self.rng.normal(0, 3, 64), 6, self.mhz, variant=v, stride_bytes=128,
                                    footprint_bytes=fp, **self.clock()) for fp in plan.sweep.footprints]
            out[name] = pd.concat(frames, ignore_index=True)
            progress(len(frames))
        return out

    def tlb(self, plan, progress):
        frames = [A.chase_frame(300 + 60 * (fp > 1 * GiB) + self.rng.normal(0, 2, 32), 0, self.mhz, variant="cg",
                                stride_bytes=s.stride, footprint_bytes=fp, **self.clock())
                  for s in plan.sweeps for fp in s.footprints]
        return pd.concat(frames, ignore_index=True)

    def bandwidth(self, plan, progress):
        rows = [{"kernel": k, "active_sms": c.active_sms, "blocks_per_sm": c.blocks_per_sm, "blocks": c.blocks,
                 "threads": c.threads, "throttle_ns": c.throttle_ns, "sms_used": c.active_sms, "rep": 0,
                 "bytes": 1, "seconds": 1e-9, "achieved_gbs": 1.0}
                for c in plan.configs for k in plan.kernels + ("memcpy",)]
        return pd.DataFrame(rows)

    def loaded(self, plan, progress):
        frames = []
        for level in range(plan.levels):
            frac = level / (plan.levels - 1)
            window = {"probe_start_ns": 2000, "probe_end_ns": 9000, "probe_start_cycles": 0,
                      "probe_end_cycles": 13860, "saturator_start_ns": 1000 if level else -1,
                      "saturator_end_ns": 10000 if level else -1, "saturator_last_end_ns": 11000 if level else 0,
                      "saturator_blocks_at_probe_start": 524 * (level > 0), "chase_mhz": self.mhz,
                      "clock_source": "chase", "valid": True, "invalid_reason": "", "attempt": 0}
            common = dict(level=level, target_fraction=frac, throttle_ns=0, achieved_gbs=4000 * frac,
                          bandwidth_fraction=frac, probe_sm=0, saturator_blocks=524 * (level > 0),
                          blocks_left_probe_sm=4 * (level > 0), **window)
            for access, base in (("hbm", 650), ("hot", 280)):
                frames.append(A.chase_frame(base * (1 + frac) + 6 + self.rng.normal(0, 2, 64), 6, self.mhz,
                                            access=access, footprint_bytes=64 * 1024, **common))
            iv = np.repeat(np.array([0, 10_000, 100_000]), 16)
            evicted = iv > 50_000 * (1 - frac)
            frames.append(A.chase_frame(np.where(evicted, 650, 280) * (1 + frac) + 6, 6, self.mhz, access="retouch",
                                        footprint_bytes=4 * MiB, **common,
                                        per_sample={"round": np.repeat(np.arange(3), 16), "interval_ns": iv,
                                                    "age_cycles": (iv * 1.98).astype(np.int64) + 5000,
                                                    "age_ns": iv + 2525.0, "prime_latency_cycles": np.full(48, 650.0)}))
        cal = pd.DataFrame({"saturator": "read", "throttle_ns": [0, 100], "achieved_gbs": [4000.0, 3000.0],
                            "blocks": 528, "threads": 512, "shared_bytes": 74752})
        return {"loaded": A.loaded_table(frames), "loaded_calibration": cal, "peak_gbs": 4000.0}


def documented_columns() -> dict[str, list[str]]:
    """Table -> columns, from docs/run-directory.md's '## Probe tables' section."""
    text = DOC.read_text()
    section = text.split("## Probe tables", 1)[1].split("\n## ", 1)[0]
    tables = {}
    for block in re.split(r"\n### ", section)[1:]:
        name = re.match(r"`probes/(\w+)\.parquet`", block)
        if name:
            tables[name.group(1)] = re.findall(r"^\| `(\w+)` \|", block, re.MULTILINE)
    return tables


def test_suite_writes_every_documented_table_with_its_columns(tmp_path):
    from sitsprof.collectors.rundir import RunDirectory, open_run

    plan = make_suite("quick", H100)
    steps = {}
    with RunDirectory.create(tmp_path, "probe-run") as run:
        facts = run_suite(run, plan, probes=FakeProbes(H100),
                          progress=lambda part, n, total: steps.__setitem__(
                              part, (steps.get(part, (0, 0))[0] + n, total)))
        run.finish("complete")
    assert facts["saturator_peak_gbs"] == 4000.0
    back = open_run(tmp_path / "probe-run")
    assert back.complete and back.meta["sm_clock_mhz"] == 1980.0
    assert [p["name"] for p in back.meta["phases"]] == ["calibrate", "latency", "tlb", "bandwidth", "loaded"]
    assert steps["latency"] == (plan.steps("latency"), plan.steps("latency"))
    documented = documented_columns()
    written = set(back.tables("probe"))
    assert written == set(documented), (written, set(documented))
    for name, columns in documented.items():
        frame = back.read_table(name, "probe")
        assert list(frame.columns) == columns, name
    # Raw tables only: what they say is derived by the reports.
    from sitsprof.reports.analysis import analyze_run

    res = analyze_run(back)
    assert [t.name for t in res.tiers] == ["l1", "l2_near", "l2_far", "hbm"]
    assert [t.name for t in res.tiers_cg][0] == "l2_near"
    assert all(s["step_at_bytes"] > 1 * GiB for s in res.tlb_steps) and len(res.tlb_steps) == 2


def test_figures_read_back_from_the_run(tmp_path, capsys):
    from sitsprof.collectors.rundir import RunDirectory
    from sitsprof.reports.figures import check_figures

    with RunDirectory.create(tmp_path, "r") as run:
        run_suite(run, make_suite("quick", H100), probes=FakeProbes(H100))
    fig = check_figures(run)
    assert [t["tier"] for t in fig["tiers"]] == ["l1", "l2_near", "l2_far", "hbm"]
    assert all(t["within"] for t in fig["tiers"])
    assert fig["copy"]["ratio"] == pytest.approx(1.0)
    assert fig["loaded"]["levels"] == 9 and fig["loaded"]["meets"]
    code, out, err = run_cli(capsys, "probe", "figures", str(tmp_path / "r"))
    assert code == 0 and "l2_near" in out and "within 15%" in out and "9 levels up to 100% of peak" in out
    assert "1980 MHz measured" in out
    with RunDirectory.create(tmp_path, "empty") as run:
        pass
    assert check_figures(run)["missing"] == ["latency", "bandwidth", "loaded"]


def test_gpu_out_of_memory_mid_run_is_one_plain_error(tmp_path):
    from sitsprof.collectors.rundir import RunDirectory, open_run
    from sitsprof.probes.errors import ProbeError

    class OutOfMemoryError(Exception):  # the name CuPy's allocator raises
        pass

    class Starved(FakeProbes):
        def bandwidth(self, plan, progress):
            raise OutOfMemoryError("Out of memory allocating 1,073,741,824 bytes")

    with pytest.raises(ProbeError, match="bandwidth: the GPU ran out of memory") as err:
        with RunDirectory.create(tmp_path, "r") as run:
            run_suite(run, make_suite("quick", H100), probes=Starved(H100))
    assert err.value.exit_code == 2
    back = open_run(tmp_path / "r")
    assert back.status == "failed" and not back.complete
    assert {"latency", "tlb"} <= set(back.tables("probe"))  # what finished before is kept
