"""`sitsprof compile --aot`: the ahead-of-time kernel module (`sitsprof.policies.aot`), or why not."""
from __future__ import annotations

from collections.abc import Callable

__all__ = ["build_aot"]


def build_aot(policy_text: str, note: Callable[[str], None]) -> dict:
    """Build the module for the streamed policies among `policy_text` ("all": every one that
    streams). A failure (no C compiler, a numba without pycc) is a note, not an error: the
    streamed replay then compiles its kernels with numba as before. Returns the build's
    summary, or {"error": text}."""
    from sitsprof.policies.aot import build, streamed_policies
    from sitsprof.policies.registry import select_policies

    wanted = set(select_policies(policy_text))
    names = [n for n in streamed_policies() if n in wanted]
    if not names:
        note("ahead of time: none of these policies streams; nothing built")
        return {"error": "no streamed policy selected"}
    try:
        done = build(names, note=lambda text: note(f"ahead of time: {text}"))
    except Exception as exc:  # a compiler missing or failing: the JIT path is still there
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        note(f"ahead of time: not built ({text}); policy simulate compiles with numba as before")
        return {"error": text}
    note(f"ahead of time: {done['exports']} kernel signature(s) in {done['folder']}/{done['file']} "
         f"({done['seconds']:.1f} s)")
    return done
