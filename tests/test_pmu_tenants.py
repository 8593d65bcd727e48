"""Issue 20.4: the GPU's other processes, read with `nvidia-smi --query-compute-apps` (read only),
before and after, in a run's meta.json; against a fake nvidia-smi that logs its arguments and
prints what a real one prints for `--format=csv,noheader,nounits`."""
from __future__ import annotations

import os

import pytest

from sitsprof.pmu.tenants import compute_apps

UUID = "GPU-00000000-fake-4200-0000-000000000000"  # tests/fake_nvml.py's device 0


def _fake_smi(tmp_path, body: str) -> tuple[str, object]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "smi-calls.txt"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/bash\necho \"$*\" >> {log}\n{body}\n")
    smi.chmod(0o755)
    return str(bin_dir), log


ROWS = ("echo '{uuid}, 4242, /usr/bin/python3 train.py, 70123'\n"
        "echo 'GPU-other-0000, 77, vllm, 1024'\n"
        "echo '{uuid}, {own}, python, [N/A]'")


def test_rows_of_the_device_and_the_others_counted(tmp_path, monkeypatch):
    path, log = _fake_smi(tmp_path, ROWS.format(uuid=UUID, own=os.getpid()))
    monkeypatch.setenv("PATH", path + os.pathsep + os.environ["PATH"])
    got = compute_apps(UUID)
    assert got["available"] and got["gpu_uuid"] == UUID
    assert got["apps"] == [
        {"gpu_uuid": UUID, "pid": 4242, "process_name": "/usr/bin/python3 train.py", "used_memory_mib": 70123},
        {"gpu_uuid": UUID, "pid": os.getpid(), "process_name": "python", "used_memory_mib": None}]
    assert got["others"] == 1  # this process's own row is not a co-tenant
    assert len(compute_apps(None)["apps"]) == 3
    calls = log.read_text().splitlines()
    assert calls == ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits"] * 2


@pytest.mark.parametrize("body, reason", [
    ("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit 9",
     "exit status 9: NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."),
    (None, "nvidia-smi not found on PATH"),
])
def test_unavailable_says_why_and_never_raises(tmp_path, monkeypatch, body, reason):
    if body is None:
        monkeypatch.setenv("PATH", str(tmp_path))
    else:
        path, _ = _fake_smi(tmp_path, body)
        monkeypatch.setenv("PATH", path)
    got = compute_apps(UUID)
    assert got == {"available": False, "reason": reason, "apps": [],
                   "command": "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory "
                              "--format=csv,noheader,nounits"}


def test_a_run_records_them_before_and_after(fake_gpu, tmp_path, monkeypatch):
    """`sitsprof run` writes meta.json `compute_apps.before` at the start and `.after` once the
    work is over (here a co-tenant appears during the run: the fake's second call lists it)."""
    from sitsprof.cli.main import main
    from sitsprof.collectors.rundir import open_run
    from sitsprof.common.sizes import GiB, MiB
    from sitsprof.probes import gpu, suite
    from sitsprof.probes.plan import DeviceLimits

    state = tmp_path / "calls"
    body = (f"n=$(cat {state} 2>/dev/null || echo 0); echo $((n + 1)) > {state}\n"
            f"[ \"$n\" -ge 1 ] && echo '{UUID}, 999, intruder, 512'\ntrue")
    path, log = _fake_smi(tmp_path, body)
    monkeypatch.setenv("PATH", path + os.pathsep + os.environ["PATH"])
    h200 = DeviceLimits(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132, l2_bytes=60 * MiB,
                        memory_bytes=141 * GiB, free_bytes=140 * GiB)
    monkeypatch.setattr(gpu, "device_limits", lambda index=0: h200)
    monkeypatch.setattr(suite, "run_suite", lambda run, plan, index=0, progress=None, probes=None: {})
    assert main(["run", "--parts", "bandwidth", "--gpm", "off", "--out", str(tmp_path), "--name", "r"]) == 0
    apps = open_run(tmp_path / "r").meta["compute_apps"]
    assert apps["before"]["available"] and apps["before"]["apps"] == [] and apps["before"]["others"] == 0
    assert apps["after"]["apps"] == [{"gpu_uuid": UUID, "pid": 999, "process_name": "intruder",
                                      "used_memory_mib": 512}]
    assert apps["after"]["others"] == 1
    assert all(c.startswith("--query-compute-apps=") for c in log.read_text().splitlines())
