"""Build the ahead-of-time kernel module `common.aot` loads: `sitsprof compile --aot` (issue 24).

A kernel compiles with the argument types of its calls, so, as `precompile` does, the surest way
to know which signatures the streamed `policy simulate` needs is to run it: `build` writes a
small oracleGeneral trace (enough distinct ids that the id table and every policy's state grow,
sizes that vary), streams it through the policies under numba (`engine.stream.stream_simulate`,
the path a large trace takes on its own; a small Mooncake file too, through `stream_lines`),
then hands every kernel that ran, with the exact numba signatures it ran with, to
`numba.pycc.CC`, which compiles the same Python source into one extension module. Nothing
here is a second implementation: the functions exported are the kernels' own `py_func`, with
the globals they call already numba's dispatchers.

Built only from kernels declared as a plain ``njit(cache=True)`` (no other option that could
change what they compute or how they are inlined) whose arguments are arrays of numbers and
scalars; `common.aot` records for each its source key and the arguments' types, and refuses a
call that does not match both. The module and its manifest are written to a fresh file name and
the manifest replaced last, so a running process never sees half of a build.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from sitsprof.common import aot, jit

from .registry import get_policy, policy_names

__all__ = ["WARM_REFS", "build", "streamed_policies"]

#: The warm trace: enough distinct ids to grow the id table past its first size (2**16 slots,
#: 3/4 full) and every policy's per-block state several times.
WARM_REFS = 300_000
WARM_IDS = 120_000
WARM_CAPACITY = 2_000


def streamed_policies() -> list[str]:
    """Policies whose resumable form streams an oracleGeneral file with default parameters."""
    from .engine.stream import StreamError, check_streamable

    out = []
    for name in policy_names():
        try:
            check_streamable(get_policy(name), {})
        except StreamError:
            continue
        out.append(name)
    return out


def _warm_file(folder: Path) -> Path:
    from .traces.oracle import ORACLE_DTYPE

    rng = np.random.default_rng(24)
    rec = np.zeros(WARM_REFS, dtype=ORACLE_DTYPE)
    ranks = np.minimum((WARM_IDS * rng.random(WARM_REFS) ** 2).astype(np.uint64), np.uint64(WARM_IDS - 1))
    rec["obj_id"] = (ranks + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    rec["timestamp"] = np.arange(WARM_REFS) // 100
    rec["obj_size"] = 1 + (ranks % np.uint64(3)).astype(np.uint32)
    rec["next_access_vtime"] = -1
    path = folder / "warm.oracleGeneral"
    rec.tofile(path)
    return path


def _warm_request_files(folder: Path, names: list[str]) -> None:
    """A Mooncake file streamed as a large one streams on its own (`engine.stream_lines`), by
    the policies among `names` that stream from request files; Bailian files share its kernels."""
    from .engine.stream_lines import line_streamable, stream_simulate_lines
    from .traces.generator import generate_requests, write_mooncake_jsonl

    modules = [m for m in (get_policy(n) for n in names) if line_streamable(m)]
    if not modules:
        return
    path = write_mooncake_jsonl(generate_requests(seed=24, duration_s=60.0), folder / "warm.jsonl")
    stream_simulate_lines(path, "mooncake", modules, [WARM_CAPACITY])


def _warm_id_table_growth(path: Path) -> None:
    """The id table grown (rehashed) as on a trace of more distinct ids than it is first sized
    for (`engine.stream.FIRST_IDS`): the warm trace's ids through the smallest table, fed as
    stream_simulate feeds them (a record field's strided view)."""
    from .traces.factorize import Factorizer
    from .traces.oracle import iter_oracle_chunks

    fac = Factorizer(bits=12)
    for _, records in iter_oracle_chunks(path, WARM_REFS):
        fac.codes(records["obj_id"].view(np.int64), out=np.empty(len(records), dtype=np.int32))


def _spec(ty) -> list | None:
    """The argument's type as `common.aot` matches it, or None when it is not an array of
    numbers or a number."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype

    if isinstance(ty, types.Array):
        if ty.layout not in ("C", "A") or not isinstance(ty.dtype, (types.Integer, types.Float, types.Boolean)):
            return None
        return ["a", as_dtype(ty.dtype).str, ty.ndim, ty.layout, bool(ty.aligned), bool(ty.mutable)]
    if isinstance(ty, types.Boolean):
        return ["s", "bool"]
    if isinstance(ty, (types.Integer, types.Float)):
        return ["s", ty.name]
    return None


def _exportable() -> list[tuple[jit.LazyKernel, list]]:
    """(kernel, [(signature, arg specs), ...]) for every plain kernel that ran compiled."""
    out = []
    for kernel in jit.kernels():
        if kernel._dispatcher is None or kernel._make is not None or kernel._args or kernel._options != {"cache": True}:
            continue
        sigs = []
        for cres in kernel._dispatcher.overloads.values():
            specs = [_spec(t) for t in cres.signature.args]
            if all(s is not None for s in specs):
                sigs.append((cres.signature, specs))
        if sigs:
            out.append((kernel, sigs))
    return out


def build(policies: list[str] | None = None, note=None) -> dict:
    """Compile the streamed path's kernels for `policies` (default: every one that streams)
    ahead of time into `common.aot.folder()`. Returns {"folder", "file", "kernels", "exports",
    "seconds"}."""
    from numba.pycc import CC

    from .engine.stream import stream_simulate

    say = note or (lambda _text: None)
    started = time.perf_counter()
    names = policies or streamed_policies()
    if jit.decide(False) != "numba":  # compiled: the dispatchers record the signatures
        raise jit.JitModeError(f"{jit.ENV}=python: nothing to compile ahead of time; unset it")
    with tempfile.TemporaryDirectory(prefix="sitsprof-aot-") as tmp:
        path = _warm_file(Path(tmp))
        stream_simulate(path, [get_policy(n) for n in names], [WARM_CAPACITY])
        _warm_id_table_growth(path)
        _warm_request_files(Path(tmp), names)
        kernels = _exportable()
        stamp = f"{int(time.time() * 1000):x}{os.getpid():x}"
        cc = CC(f"{aot.MODULE}")
        cc.output_dir = tmp
        cc.output_file = f"{aot.MODULE}-{stamp}.so"
        manifest = {"format": aot.FORMAT, "file": cc.output_file, "policies": names, "kernels": {}}
        exports = 0
        for i, (kernel, sigs) in enumerate(kernels):
            entry = []
            for j, (sig, specs) in enumerate(sigs):
                name = f"k{i}_{j}"
                cc.export(name, sig)(kernel.py_func)
                entry.append({"name": name, "args": specs, "signature": str(sig)})
                exports += 1
            manifest["kernels"][aot.kernel_id(kernel)] = {"key": aot.source_key(kernel.py_func.__module__),
                                                          "exports": entry}
        say(f"compiling {exports} signature(s) of {len(kernels)} kernel(s) for {', '.join(names)}")
        left_out = _compile(cc, manifest, say)
        exports -= len(left_out)
        folder = aot.folder()
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / cc.output_file, folder / f"{cc.output_file}.part")  # /tmp may be another disk
        os.replace(folder / f"{cc.output_file}.part", folder / cc.output_file)
        old = None
        try:
            old = json.loads((folder / aot.MANIFEST).read_text()).get("file")
        except (OSError, ValueError, AttributeError):
            pass
        part = folder / f"{aot.MANIFEST}.{stamp}"
        part.write_text(json.dumps(manifest, indent=1))
        os.replace(part, folder / aot.MANIFEST)
        if old and old != cc.output_file:  # a process that mapped it keeps its pages
            (folder / old).unlink(missing_ok=True)
    aot.reset()
    return {"folder": str(folder), "file": cc.output_file, "kernels": len(manifest["kernels"]), "exports": exports,
            "left_out": left_out, "policies": names, "seconds": time.perf_counter() - started}


def _failed_export(exc: BaseException) -> str | None:
    """The export pycc was compiling when `exc` was raised (its loop's `entry`), or None."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "_cull_exports" and "entry" in frame.f_locals:
            return frame.f_locals["entry"].symbol
        tb = tb.tb_next
    return None


def _compile(cc, manifest: dict, say) -> list[str]:
    """`cc.compile()`, leaving out an export pycc cannot type and compiling again: numba's
    ahead-of-time pipeline refuses a few kernels the JIT takes (lirs's `replay_window`: a local
    assigned two module constants), and those stay JIT-compiled. Returns the left-out kernels."""
    left_out = []
    while True:
        try:
            cc.compile()
            return left_out
        except Exception as exc:  # numba's typing and lowering errors have no common base
            symbol = _failed_export(exc)
            if symbol is None or symbol not in cc._exported_functions:
                raise
            del cc._exported_functions[symbol]
            for kid, entry in list(manifest["kernels"].items()):
                entry["exports"] = [e for e in entry["exports"] if e["name"] != symbol]
                if not entry["exports"]:
                    del manifest["kernels"][kid]
                    left_out.append(kid)
            say(f"left out {symbol} ({type(exc).__name__}: {str(exc).splitlines()[0][:100]}); compiling again")
