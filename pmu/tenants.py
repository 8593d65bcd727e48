"""The GPU's other processes, read (never changed) with `nvidia-smi --query-compute-apps`.

Why: on a lent, shared node a co-tenant's kernels would load the L2 and HBM and bend every
latency the probes take, and nothing in a run said whether one was there. A run (and the device
check) records the list before the work and after it; a reader can then tell a quiet GPU from a
shared one. `--query-compute-apps` is one of nvidia-smi's long-standing read-only queries
(`nvidia-smi --help-query-compute-apps`); it changes nothing on the card.

In a container the PIDs are the host's or absent, so the list is recorded as nvidia-smi gives
it and `others` counts the rows whose PID is not this process's own.
"""
from __future__ import annotations

import os
import shutil
import subprocess

__all__ = ["FIELDS", "FORMAT", "QUERY", "compute_apps"]

FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
QUERY = f"--query-compute-apps={','.join(FIELDS)}"
FORMAT = "--format=csv,noheader,nounits"


def _number(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def compute_apps(gpu_uuid: str | None = None, timeout_s: float = 10.0) -> dict:
    """{"available", "command", "apps": [{gpu_uuid, pid, process_name, used_memory_mib}], "others"}
    from nvidia-smi, only the rows of `gpu_uuid` when given; {"available": False, "reason"} when
    nvidia-smi is missing, fails or times out. Never raises: the run goes on either way."""
    exe = shutil.which("nvidia-smi")
    command = ["nvidia-smi", QUERY, FORMAT]
    if exe is None:
        return {"available": False, "command": " ".join(command), "reason": "nvidia-smi not found on PATH", "apps": []}
    try:
        proc = subprocess.run([exe, QUERY, FORMAT], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "command": " ".join(command), "reason": f"{type(exc).__name__}: {exc}",
                "apps": []}
    if proc.returncode != 0:
        said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return {"available": False, "command": " ".join(command),
                "reason": f"exit status {proc.returncode}: {said[0] if said else 'no output'}", "apps": []}
    apps = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < len(FIELDS) or not parts[0]:
            continue
        uuid, pid, name, mem = parts[0], parts[1], ",".join(parts[2:-1]), parts[-1]
        if gpu_uuid and uuid != gpu_uuid:
            continue
        apps.append({"gpu_uuid": uuid, "pid": _number(pid), "process_name": name, "used_memory_mib": _number(mem)})
    own = os.getpid()
    return {"available": True, "command": " ".join(command), "gpu_uuid": gpu_uuid, "apps": apps,
            "others": sum(1 for a in apps if a["pid"] != own)}
