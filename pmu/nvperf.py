"""Make CUPTI's nvperf libraries loadable before PM sampling is enabled.

Why: CUPTI's profiling APIs (PM sampling, the profiler host) `dlopen` `libnvperf_host.so` and
`libnvperf_target.so` by bare name at run time. `libcupti.so.13` in the nvidia-cuda-cupti wheel
carries no RUNPATH, and cupti-python locates only libcupti itself (through cuda.pathfinder), so
unless the wheel's `nvidia/cu13/lib` folder is on `LD_LIBRARY_PATH` the `dlopen` fails and
`Collector.enable()` raises "CUPTI could not load the nvperf* libraries required for profiling".
cupti-python's own docs say so: User Guide, Getting Started, "Profiling Library Configuration"
(13.3.0; "Making nvperf* Libraries Discoverable" in 13.5.0): "the CUPTI shared library
dynamically loads libnvperf_host.so and libnvperf_target.so at runtime. These ship in the same
directory as libcupti.so*, so make that directory discoverable to the dynamic linker via
LD_LIBRARY_PATH" (https://docs.nvidia.com/cupti-python/13.3.0/user-guide/topics/getting-started.html).

Why a preload and not `os.environ["LD_LIBRARY_PATH"]`: the dynamic loader reads
LD_LIBRARY_PATH once, when the process starts; changing it later does not reach `dlopen`. A
library already loaded is, however, found again by its SONAME (both nvperf libraries' SONAME is
their bare file name), so opening the two files by full path with RTLD_GLOBAL before
`enable()` makes CUPTI's bare-name `dlopen` succeed, whatever the environment says.

Which folder: the one holding the libcupti this process already loaded, or that cuda.pathfinder
loads for cupti-python (same CUPTI release as the nvperf next to it), else the installed
nvidia-cuda-cupti wheel's files (its RECORD), else a bare-name load (LD_LIBRARY_PATH or
ldconfig already provide them), else `nvidia/*/lib` under the interpreter's site folders, else
`$CUDA_HOME/extras/CUPTI/lib64`.
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DOCS", "LIBRARIES", "NvperfStatus", "ensure_nvperf"]

LIBRARIES = ("libnvperf_target.so", "libnvperf_host.so")  # target first: host does not need it, CUPTI needs both
DOCS = ("cupti-python's docs, Getting Started, 'Profiling Library Configuration': "
        "https://docs.nvidia.com/cupti-python/13.3.0/user-guide/topics/getting-started.html")
_WHEELS = ("nvidia-cuda-cupti", "nvidia-cuda-cupti-cu12")


@dataclass
class NvperfStatus:
    """Where the nvperf libraries were loaded from (`folder`, "" for a bare-name load), or why not."""

    loaded: bool
    folder: str | None
    how: str
    tried: list[str] = field(default_factory=list)

    def reason(self) -> str:
        if self.loaded:
            return f"nvperf loaded ({self.how}{': ' + self.folder if self.folder else ''})"
        where = "; ".join(self.tried) or "nowhere to look"
        return (f"libnvperf_host.so / libnvperf_target.so not found (looked in: {where}); install "
                f"nvidia-cuda-cupti or put the folder holding them on LD_LIBRARY_PATH ({DOCS})")


_STATUS: NvperfStatus | None = None


def _loaded_cupti_folder() -> str | None:
    """The folder of the libcupti.so* this process has mapped, if any (Linux /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if os.path.basename(path).startswith("libcupti.so"):
                    return os.path.dirname(path)
    except OSError:
        pass
    return None


def _pathfinder_cupti_folder() -> str | None:
    """The folder of the libcupti cupti-python will use: it loads it with cuda.pathfinder, which
    caches the load, so asking first loads the very same file (None without cuda-pathfinder)."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        path = load_nvidia_dynamic_lib("cupti").abs_path
    except Exception:  # noqa: BLE001 - no pathfinder, no libcupti: the other places are tried
        return None
    return os.path.dirname(path) if path else None


def _wheel_folders() -> list[str]:
    """Folders of the installed nvidia-cuda-cupti wheel's libnvperf_host.so, from its RECORD."""
    from importlib.metadata import PackageNotFoundError, distribution

    found = []
    for name in _WHEELS:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        for entry in dist.files or ():
            if entry.name == "libnvperf_host.so":
                found.append(os.path.dirname(os.fspath(dist.locate_file(entry))))
    return found


def _site_folders() -> list[str]:
    """`nvidia/*/lib` folders under the interpreter's import path (the wheels' layout, cu12 and cu13)."""
    found = []
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir():
            found.extend(str(p.parent) for p in sorted(base.glob("*/lib/libnvperf_host.so")))
    return found


def _toolkit_folders() -> list[str]:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return [os.path.join(home, "extras", "CUPTI", "lib64")]


def _has_both(folder: str) -> bool:
    return all(os.path.isfile(os.path.join(folder, lib)) for lib in LIBRARIES)


def _load(paths: list[str]) -> None:
    for path in paths:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def ensure_nvperf(*, refresh: bool = False) -> NvperfStatus:
    """Load the two nvperf libraries once per process (RTLD_GLOBAL), so CUPTI's bare-name dlopen finds them.

    Never raises: the status says where they came from, or where it looked; the caller puts
    `reason()` into the one-line error when PM sampling then cannot be enabled.
    """
    global _STATUS
    if _STATUS is not None and _STATUS.loaded and not refresh:
        return _STATUS
    loaded = _loaded_cupti_folder() or _pathfinder_cupti_folder()
    candidates = ([("beside the loaded libcupti", loaded)] if loaded else [])
    candidates += [("nvidia-cuda-cupti wheel", f) for f in _wheel_folders()]
    candidates.append(("on the loader path", None))  # LD_LIBRARY_PATH / ldconfig: what CUPTI finds itself
    candidates += [("site-packages nvidia/*/lib", f) for f in _site_folders()]
    candidates += [("CUDA toolkit", f) for f in _toolkit_folders()]
    tried: list[str] = []
    seen: set[str | None] = set()
    for how, folder in candidates:
        if folder in seen:
            continue
        seen.add(folder)
        if folder is not None and not _has_both(folder):
            tried.append(folder)
            continue
        try:
            _load([os.path.join(folder, lib) if folder else lib for lib in LIBRARIES])
        except OSError as exc:
            tried.append(f"{folder} ({exc})" if folder else "the loader path (LD_LIBRARY_PATH, ldconfig)")
            continue
        _STATUS = NvperfStatus(True, folder or "", how, tried)
        return _STATUS
    _STATUS = NvperfStatus(False, None, "not found", tried)
    return _STATUS
