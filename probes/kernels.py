"""The probes' CUDA C sources, and how they are compiled.

On the GPU, CuPy compiles them at run time (`gpu.load_module`, NVRTC, for the device's own
architecture). On CPU, `compile_cubin` builds the same text for sm_90 with nvcc when it is
on PATH, else with NVRTC from the `nvidia-cuda-nvrtc` wheel (through ctypes), and
`disassemble` runs the `nvidia-cuda-cuobjdump` wheel's cuobjdump on the result: that is how
the tests check register spills and the SASS of the chase loads and timers.

Local `#include "x.cuh"` lines are inlined (`kernel_source`, each header once, its
`#pragma once` dropped), so NVRTC needs no include path.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .errors import CompileError

__all__ = [
    "KERNEL_DIR",
    "KERNEL_FILES",
    "NVCC_OPTIONS",
    "CompileResult",
    "available_compiler",
    "compile_cubin",
    "cuobjdump_path",
    "disassemble",
    "kernel_constants",
    "kernel_source",
    "nvrtc_library",
    "parse_ptxas_log",
    "sass_instructions",
]

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
# One kernel family per file, and the entry points each defines.
KERNEL_FILES: dict[str, tuple[str, ...]] = {
    "chase": ("chase_init", "chase_cg", "chase_ca", "timer_overhead", "sm_clock_rate"),
    "bandwidth": ("bw_read", "bw_write", "bw_copy", "fill_random"),
    "loaded": ("loaded_chase", "retouch_probe", "saturator_read", "saturator_copy"),
}
# No -std: C++17 is the default of nvcc and NVRTC 13, and CuPy may add its own -std.
NVCC_OPTIONS = ("-lineinfo",)
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)\s+(\d+)[uUlL]*\s*$", re.MULTILINE)


def kernel_source(name: str) -> str:
    """The source of `kernels/<name>.cu` with its local includes inlined (each once)."""
    path = KERNEL_DIR / f"{name}.cu"
    if not path.exists():
        raise CompileError(f"no probe kernel file {path}")
    seen: set[str] = set()

    def expand(text: str) -> str:
        def include(match: re.Match) -> str:
            header = match.group(1)
            if header in seen:
                return ""
            seen.add(header)
            text = (KERNEL_DIR / header).read_text()
            return expand(re.sub(r"^\s*#\s*pragma\s+once\s*$", "", text, flags=re.MULTILINE))

        return _INCLUDE.sub(include, text)

    return expand(path.read_text())


@cache
def kernel_constants() -> dict[str, int]:
    """The integer `#define`s of kernels/*.cu and *.cuh, by name.

    The host sizes buffers and reads control words by these numbers (a saturator buffer must be
    a multiple of threads x STREAM_UNROLL, or the kernel reads past it), so it takes them from
    the kernel text rather than from copies that could drift. A name defined twice with two
    values is refused.
    """
    out: dict[str, int] = {}
    for path in sorted(KERNEL_DIR.glob("*.cu*")):
        for name, value in _DEFINE.findall(path.read_text()):
            if out.setdefault(name, int(value)) != int(value):
                raise CompileError(f"{name} is defined as {out[name]} and as {value} in kernels/")
    return out


@dataclass
class CompileResult:
    """A cubin and the compiler's log (with ptxas -v resource lines)."""

    cubin: bytes
    log: str
    compiler: str  # "nvcc" or "nvrtc"

    def resource_usage(self) -> dict[str, dict[str, int]]:
        """Per entry point: registers, stack frame and spill bytes, from the ptxas -v lines."""
        return parse_ptxas_log(self.log)


def parse_ptxas_log(log: str) -> dict[str, dict[str, int]]:
    """Parse `ptxas -v` output into {function: {registers, stack, spill_stores, spill_loads}}."""
    usage: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([A-Za-z_]\w*)'?", line)
        if m:
            current = m.group(1)
            usage.setdefault(current, {})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            usage[current].update(
                stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3))
            )
        m = re.search(r"Used (\d+) registers", line)
        if m:
            usage[current]["registers"] = int(m.group(1))
    return usage


def _wheel_file(*parts: str) -> Path | None:
    """A file inside an installed NVIDIA wheel (site-packages/nvidia/<cuXX>/...), if any."""
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for sub in sorted(Path(root).glob("cu*")) + [Path(root) / "cuda_nvrtc", Path(root) / "cuda_cuobjdump"]:
            candidate = sub.joinpath(*parts)
            if candidate.exists():
                return candidate
    return None


def nvrtc_library() -> Path | None:
    """libnvrtc.so from the nvidia-cuda-nvrtc wheel."""
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        found = _wheel_file("lib", name)
        if found:
            return found
    return None


def cuobjdump_path() -> Path | None:
    """cuobjdump from the nvidia-cuda-cuobjdump wheel, else from PATH."""
    found = _wheel_file("bin", "cuobjdump")
    if found:
        return found
    which = shutil.which("cuobjdump")
    return Path(which) if which else None


def available_compiler() -> str | None:
    """'nvcc' when nvcc is on PATH, else 'nvrtc' when the wheel's library loads, else None."""
    if shutil.which("nvcc"):
        return "nvcc"
    if nvrtc_library() is not None:
        return "nvrtc"
    return None


def compile_cubin(name: str, arch: str = "sm_90", compiler: str | None = None) -> CompileResult:
    """Compile `kernels/<name>.cu` to a cubin for `arch`, with `ptxas -v` in the log."""
    compiler = compiler or available_compiler()
    source = kernel_source(name)
    if compiler == "nvcc":
        return _compile_nvcc(name, source, arch)
    if compiler == "nvrtc":
        return _compile_nvrtc(name, source, arch)
    raise CompileError("neither nvcc (on PATH) nor the nvidia-cuda-nvrtc wheel is available")


def _compile_nvcc(name: str, source: str, arch: str) -> CompileResult:
    with tempfile.TemporaryDirectory(prefix="sitsprof-nvcc-") as tmp:
        src = Path(tmp) / f"{name}.cu"
        out = Path(tmp) / f"{name}.cubin"
        src.write_text(source)
        cmd = ["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", *NVCC_OPTIONS, "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed on kernels/{name}.cu:\n{log}")
        return CompileResult(out.read_bytes(), log, "nvcc")


def _compile_nvrtc(name: str, source: str, arch: str) -> CompileResult:
    lib_path = nvrtc_library()
    if lib_path is None:
        raise CompileError("the nvidia-cuda-nvrtc wheel is not installed")
    lib = ctypes.CDLL(str(lib_path))
    prog = ctypes.c_void_p()

    def check(status: int, what: str) -> None:
        if status != 0:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise CompileError(f"NVRTC {what} failed on kernels/{name}.cu: {lib.nvrtcGetErrorString(status).decode()}")

    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None), "create")
    try:
        opts = [f"-arch={arch}", *NVCC_OPTIONS, "-Xptxas=-v"]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        status = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if status != 0:
            raise CompileError(f"NVRTC failed on kernels/{name}.cu:\n{log}")
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetCUBIN(prog, cubin), "get cubin")
        return CompileResult(cubin.raw, log, "nvrtc")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def disassemble(cubin: bytes, function: str | None = None) -> str:
    """SASS text of a cubin (cuobjdump -sass; its nvdisasm sits beside it in the wheel)."""
    tool = cuobjdump_path()
    if tool is None:
        raise CompileError("cuobjdump not found (install the nvidia-cuda-cuobjdump wheel)")
    env = dict(os.environ)
    env["PATH"] = f"{tool.parent}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        cmd = [str(tool), "-sass", f.name] + (["-fun", function] if function else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        hint = " (install the nvidia-cuda-nvdisasm wheel beside it)" if "nvdisasm" in proc.stderr else ""
        raise CompileError(f"cuobjdump failed: {proc.stderr.strip()}{hint}")
    return proc.stdout


def sass_instructions(sass: str) -> list[str]:
    """The instruction text of each SASS line (address and encoding stripped)."""
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            out.append(m.group(1))
    return out


if __name__ == "__main__":  # python -m sitsprof.probes.kernels [name]: compile report
    for kernel in sys.argv[1:] or list(KERNEL_FILES):
        result = compile_cubin(kernel)
        print(kernel, result.compiler, result.resource_usage())
