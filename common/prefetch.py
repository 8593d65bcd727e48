"""``prefetch(arr, i)``: ask the CPU to start loading ``arr[i]``'s cache line, from compiled kernels.

Why: a policy kernel is bound by memory latency, not by arithmetic. Each reference reads its
block's metadata (links, list code, heap slot) at a random place in arrays of several MB, and
the next reference's loads wait behind this one's. The trace is known in advance, so a kernel
can name the block it will serve `AHEAD` references from now and have its metadata on the way
while it serves this one. On the bench trace (bench/README.md, "prefetch") this made the ARC,
2Q and LFU kernels 1.3-1.6x faster; results cannot change: a prefetch is a hint, it reads
nothing into the program and never faults (LLVM's ``llvm.prefetch`` intrinsic,
https://llvm.org/docs/LangRef.html#llvm-prefetch-intrinsic, lowered to x86 ``PREFETCHT0``).

Built like a kernel (`common.jit.LazyKernel`): numba is imported only when the first kernel
compiles, and then every module's ``prefetch`` global is the numba intrinsic
(``numba.extending.intrinsic``, https://numba.readthedocs.io/en/stable/extending/high-level.html#implementing-intrinsics).
Interpreted (``SITSPROF_JIT=python``) it does nothing. `arr` is a 1-D array (a strided view
too); `i` any integer: out of range is allowed (no load happens), so callers need no check.
"""
from __future__ import annotations

from .jit import LazyKernel

__all__ = ["AHEAD", "prefetch"]

#: How many references ahead kernels prefetch: far enough that the line arrives before its
#: turn (an L3 or DRAM access is 50-300 cycles, a reference ~20-60), near enough that it is
#: not evicted from L1 before then. 8 measured best of 4, 8, 16, 32, 64 for LFU and ARC.
AHEAD = 8


def _hint(arr, i):
    """Interpreted form: nothing (a prefetch changes no result)."""


def _make():
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, arr, i):
        if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(i, types.Integer):
            return None  # numba then reports no matching signature
        sig = types.void(arr, i)

        def codegen(context, builder, signature, args):
            aryty, ity = signature.args
            ary = context.make_array(aryty)(context, builder, args[0])
            idx = context.cast(builder, args[1], ity, types.intp)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            # (address, 0: read, 3: keep in all cache levels, 1: data cache)
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return sig, codegen

    return prefetch


prefetch = LazyKernel(_hint, (), {}, make=_make)
