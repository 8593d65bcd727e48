"""The device check (`probes/device_check.sh`) and the rules that keep a shared GPU as it was
(issue 10 items 1 and 2), checked on CPU: the dry run's steps and budgets, a real run on a
node without nvidia-smi or without CuPy (it stops at the first hard failure and says so), the
`run` command's default `--clocks none`, and the skip of GPU tests that change clocks."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "probes" / "device_check.sh"
# nvidia-smi options that change a card: persistence, MIG, locked/application clocks, power limit, reset
SMI_SETTERS = re.compile(r"nvidia-smi\b[^\n|;&]*\s(-pm|--persistence-mode|-mig|--multi-instance-gpu|-lgc|"
                         r"--lock-gpu-clocks|-lmc|--lock-memory-clocks|-rgc|-rmc|-ac|-rac|-pl|--power-limit|"
                         r"-r|--gpu-reset|--reset\S*)(\s|=|$)")
TOOLS = ("bash", "env", "date", "mkdir", "rm", "tee", "timeout", "cat", "tail", "grep", "find", "wc", "tar",
         "dirname", "ls", "hostname", "sed", "cmp", "ln", "python3")


def _dry_run(env=None) -> tuple[list[dict], str]:
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60,
                          env=env or os.environ.copy())
    assert proc.returncode == 0, proc.stderr
    steps = []
    for line in proc.stdout.splitlines():
        head = re.match(r"step (\d+)/(\d+) (\S+)\s+budget\s+(\d+) s\s+(hard|soft|always)", line)
        if head:
            steps.append({"name": head[3], "budget": int(head[4]), "kind": head[5], "command": ""})
        elif line.startswith("    | "):
            steps[-1]["command"] += line[6:] + "\n"
    return steps, proc.stdout


def test_dry_run_lists_each_step_with_a_budget_under_six_minutes(tmp_path):
    """Issue 10 item 2: one script, each step with its own budget, the total under 360 s, and the
    dry run changes nothing (no $OUT, no scratch folder)."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DEVICE_CHECK_WORK": str(tmp_path / "work")}
    steps, text = _dry_run(env)
    names = [s["name"] for s in steps]
    assert names == ["gpu-state", "install", "devices", "pm-sets", "gpu-tests", "quick-suite", "figures",
                     "ncu-check", "state-after", "pack"]
    assert all(s["budget"] > 0 and s["command"] for s in steps)
    total = sum(s["budget"] for s in steps)
    assert total < 360 and f"total budget: {total} s (limit 360 s)" in text
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()
    by = {s["name"]: s["command"] for s in steps}
    # wheels from the ignored .whl/ folder, offline; CUPTI 13.4
    assert "--no-index --find-links \"$ROOT/.whl\"" in by["install"] and "nvidia-cuda-cupti==13.4.*" in by["install"]
    assert all(p in by["install"] for p in ("cupti-python", "pyelftools", "plotly"))
    # issue 20.2: the one hard pip line asks for what measuring needs, nothing else
    hard = [line for line in by["install"].splitlines() if "pip install" in line and "exit 1" in line]
    assert len(hard) == 1 and re.findall(r'"?([a-z][a-z-]+)(?:>=[\d.]+)?"? ', hard[0].split("$ROOT/.whl\"")[1]
                                         .split("||")[0] + " ") == ["numpy", "pandas", "pyarrow", "click", "rich",
                                                                     "nvidia-ml-py"], hard
    assert not any(p in hard[0] for p in ("plotly", "prometheus", "pytest", "numba", "jinja2"))
    # sitsprof through the venv's python, never a `sitsprof` looked up on PATH
    assert not re.search(r"(^|[\s;|&(])sitsprof\s", "".join(by.values()))
    assert '"$VPY" -m sitsprof.cli.main devices --json --counters' in by["devices"]
    assert "--query-gpu" in by["gpu-state"] and "persistence_mode" in text and "mig.mode.current" in text
    assert "power.limit" in text and "clocks.applications.graphics" in text
    assert "pm_sampling_sets" in text  # the chip's single-pass PM-sampling sets, through pmu.cupti_pm
    tests = by["gpu-tests"]
    assert "-m pytest -m gpu" in tests and "tests/test_pmu_gpu.py tests/test_probes_gpu.py" in tests
    assert "env -u SITSPROF_ALLOW_CLOCK_CHANGES" in tests
    assert "run --suite quick --clocks none" in by["quick-suite"]
    assert "probe figures" in by["figures"] and "tar -czf" in by["pack"]


def test_no_step_changes_clocks_or_card_settings():
    """Issue 10 item 1: no `--clocks max|base|tdp`, no `--clocks lock`, no nvidia-smi setter;
    issue 20.5: every ncu call says `--clock-control none` (ncu's default locks clocks to base)."""
    steps, _ = _dry_run()
    ncu_calls = 0
    for s in steps:
        assert not re.search(r"--clocks[ =](max|base|tdp|lock)", s["command"]), s
        assert not SMI_SETTERS.search(s["command"]), s
        for call in re.findall(r"(?<![\w-])ncu\s+--[^\n]*", s["command"]):  # ncu run with options
            ncu_calls += 1
            assert "--clock-control none" in call, call
    assert ncu_calls == 1  # the optional saturator cross-check
    assert SMI_SETTERS.search("nvidia-smi -i 0 -lgc 1980") and SMI_SETTERS.search("nvidia-smi -pm 1")  # the check bites


def _fake_path(tmp_path, nvidia_smi: str | None) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    if nvidia_smi is not None:
        (bin_dir / "nvidia-smi").write_text(nvidia_smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    return str(bin_dir)


def _files(out: Path) -> list[Path]:
    return [p.relative_to(out) for p in out.rglob("*") if p.is_file()]


def test_without_nvidia_smi_it_stops_at_the_first_step_with_one_clear_line(tmp_path):
    """Issue 10 item 2: a node without nvidia-smi stops at the first hard failure, says why in one
    line, runs nothing after it but the packing, and leaves at most 8 files in $OUT."""
    out = tmp_path / "out"
    env = {"PATH": _fake_path(tmp_path, None), "OUT": str(out), "DEVICE_CHECK_WORK": str(tmp_path / "work"),
           "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode != 0
    stop = [line for line in proc.stdout.splitlines() if "STOPPED" in line]
    assert stop == ["device check: STOPPED at step 1/10 gpu-state (hard failure, exit status 127 after 0 s): "
                    "nvidia-smi not found on PATH: no NVIDIA driver on this node (or PATH lacks it); "
                    "nothing can be checked"] or (len(stop) == 1 and "nvidia-smi not found on PATH" in stop[0]
                                                  and "step 1/10 gpu-state (hard failure" in stop[0])
    assert "step 2/10 install: not run (stopped at step 1 gpu-state)" in proc.stdout
    assert "step 10/10 pack" in proc.stdout and "no run directory to pack" in proc.stdout
    files = _files(out)
    assert 1 <= len(files) <= 8 and all(len(f.parts) == 1 for f in files), files
    assert (out / "summary.txt").read_text().count("STOPPED") == 1


def test_it_only_queries_nvidia_smi_and_stops_where_cupy_is_missing(tmp_path):
    """Issue 10 items 1 and 2: with a (fake) nvidia-smi, the card's state is recorded and the only
    nvidia-smi calls are queries; without CuPy (none here) it stops at the install step, in one
    line, having left its files in $OUT."""
    out, log = tmp_path / "out", tmp_path / "smi-calls.txt"
    smi = ("#!/bin/bash\n"
           f"echo \"$*\" >> {log}\n"
           "echo 'index, name, persistence_mode, mig.mode.current, power.limit'\n"
           "echo '0, NVIDIA H200, Disabled, Disabled, 700.00 W'\n")
    env = {"PATH": _fake_path(tmp_path, smi), "OUT": str(out), "DEVICE_CHECK_WORK": str(tmp_path / "work"),
           "HOME": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0, proc.stdout
    assert "step 1 gpu-state: ok" in proc.stdout and "NVIDIA H200" in (out / "gpu-state.txt").read_text()
    stop = [line for line in proc.stdout.splitlines() if "STOPPED" in line]
    assert len(stop) == 1 and "step 2/10 install (hard failure" in stop[0], proc.stdout
    calls = log.read_text().splitlines()
    assert calls and all(c.startswith(("--query-gpu=", "--query-compute-apps=")) for c in calls), calls
    # issue 20.4: the GPU's other processes, read before the check (and after it: state-after)
    assert "--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv" in calls
    state = (out / "gpu-state.txt").read_text()
    assert "# compute processes before the check" in state and "# compute processes after the check" in state
    assert calls.count("--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv") == 2
    assert not any(SMI_SETTERS.search("nvidia-smi " + c) for c in calls)
    files = _files(out)
    assert len(files) <= 8 and all(len(f.parts) == 1 for f in files), files


def test_run_defaults_to_clocks_none(fake_gpu, tmp_path, monkeypatch):
    """Issue 10 item 1: `sitsprof run` leaves the clocks alone unless asked (like `probe`): no
    lock is applied and the run says mode none."""
    from sitsprof.cli.main import main
    from sitsprof.collectors.rundir import open_run
    from sitsprof.common.sizes import GiB, MiB
    from sitsprof.probes import gpu, suite
    from sitsprof.probes.plan import DeviceLimits

    h200 = DeviceLimits(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=50 * MiB,
                        memory_bytes=141 * GiB, free_bytes=140 * GiB)
    monkeypatch.setattr(gpu, "device_limits", lambda index=0: h200)
    locked = []

    def run_suite(run, plan, index=0, progress=None, probes=None):
        locked.append(fake_gpu.state["devices"][0]["locked_gpu"])
        return {}

    monkeypatch.setattr(suite, "run_suite", run_suite)
    assert main(["run", "--parts", "bandwidth", "--gpm", "off", "--out", str(tmp_path), "--name", "r"]) == 0
    assert locked == [None]
    assert open_run(tmp_path / "r").meta["clocks"]["mode"] == "none"


@pytest.mark.parametrize("allowed", [False, True])
def test_gpu_tests_that_change_clocks_skip_unless_allowed(allowed):
    """Issue 10 item 1: the clock-lock GPU test is marked `clock_changes` and skips, naming
    SITSPROF_ALLOW_CLOCK_CHANGES=1, unless that is set (then only the no-GPU skip is left here)."""
    env = {k: v for k, v in os.environ.items() if k != "SITSPROF_ALLOW_CLOCK_CHANGES"}
    if allowed:
        env["SITSPROF_ALLOW_CLOCK_CHANGES"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "clock_changes",
                           "tests/test_pmu_gpu.py"], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert "1 skipped" in proc.stdout, proc.stdout
    assert ("SITSPROF_ALLOW_CLOCK_CHANGES=1" in proc.stdout) is (not allowed), proc.stdout


def test_a_clean_copy_of_the_tree_plans_under_six_minutes_and_runs_until_cupy(tmp_path):
    """Issue 20.5: the device tool sends a copy of the tracked tree (no .venv, no .whl, no
    caches). From such a copy the dry run lists every step within 360 s of budgets and makes
    nothing; the real script, with a (fake, query-only) nvidia-smi, runs from the copy, writes
    only into its own $OUT and scratch, and stops at the install step (no CuPy here) in one line,
    well inside its budget."""
    import time

    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    copy = tmp_path / "tree"
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / rel)
    script = copy / "probes" / "device_check.sh"
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "DEVICE_CHECK_WORK")}
    proc = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    total = int(re.search(r"total budget: (\d+) s \(limit 360 s\)", proc.stdout)[1])
    assert total < 360 and len(re.findall(r"^step \d+/10 ", proc.stdout, re.M)) == 10
    assert not (copy / "device-out").exists() and not (copy / ".device-check").exists()
    smi = "#!/bin/bash\necho 'index, name, persistence_mode'\necho '0, NVIDIA H200, Enabled'\n"
    env = {"PATH": _fake_path(tmp_path, smi), "HOME": str(tmp_path), "PYTHON": sys.executable}
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, env=env)
    took = time.monotonic() - t0
    assert proc.returncode != 0
    stop = [line for line in proc.stdout.splitlines() if "STOPPED" in line]
    assert len(stop) == 1 and "step 2/10 install (hard failure" in stop[0], proc.stdout
    assert "step 10/10 pack" in proc.stdout and took < 10 + 40 + 10 + 10 + 4 * 10
    made = sorted(p.name for p in copy.iterdir() if p.name not in {p.split("/")[0] for p in
                                                                  files.decode().split("\0") if p})
    assert made == [".device-check", "device-out"], made
