"""Cache capacities: one checked block count, and the grammar users write them in.

`check_capacity` is the engine's single gate (every replay, curve and cost run passes
through it), so an impossible capacity fails with the same message whatever the entry
point. `parse_capacities` reads the command line's lists: `1000,10k,2M,5%`, where a
percentage is of the trace's distinct blocks (so one command line fits traces of any size)
and must be within 0% < p <= 100% (a block count may exceed the trace's blocks: a cache
larger than the working set is a real configuration; a percentage past 100% is a typo).
"""
from __future__ import annotations

import math
import numbers
import re

from ..errors import CapacityError

__all__ = [
    "check_capacity",
    "fraction_capacities",
    "parse_capacities",
]

_CAPACITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM%]?)\s*$")
_BYTES = re.compile(r"^\s*\d+(?:\.\d+)?\s*(?:[kKmMgGtT][iI]?)?[bB]\s*$")  # 60GiB, 512MB, 4096B (not 10k, 2M)


def check_capacity(capacity) -> int:
    """`capacity` as a positive int, or CapacityError naming the value and the fix."""
    if isinstance(capacity, bool) or not isinstance(capacity, numbers.Real):
        raise CapacityError(
            f"capacity {capacity!r} is not a number of blocks; give a positive integer such as 1000"
        )
    if isinstance(capacity, numbers.Integral) or (math.isfinite(capacity) and float(capacity).is_integer()):
        value = int(capacity)
    else:
        raise CapacityError(
            f"capacity {capacity!r} is not a whole number of blocks; give a positive integer such as 1000"
        )
    if value <= 0:
        raise CapacityError(
            f"capacity {value} is not positive: a cache must hold at least one block "
            "(give a capacity of 1 or more blocks, e.g. 1000)"
        )
    return value


def parse_capacities(text: str, n_blocks: int, block_bytes: float | None = None) -> list[int]:
    """`1000,10k,2M,5%` -> block counts; a percentage is of the trace's distinct blocks; with
    `block_bytes`, `60GiB` is that memory's whole blocks."""
    from sitsprof.common.sizes import parse_size

    caps: list[int] = []
    for item in str(text).split(","):
        if not item.strip():
            continue
        if _BYTES.match(item):
            if not block_bytes:
                raise CapacityError(f"capacity {item.strip()!r} is memory, and these blocks have no size in bytes; "
                                    "give a block count such as 10k or a percentage such as 5%")
            size = parse_size(item.strip().replace(" ", ""))
            blocks = int(size // block_bytes)
            if blocks < 1:  # as -c 0 is refused: a pool that holds no block is no pool
                held = ("is no memory" if size <= 0 else
                        f"holds no whole block ({block_bytes:,.0f} bytes a block per GPU)")
                raise CapacityError(f"capacity {item.strip()!r} {held}; give more memory such as 60GiB, or a "
                                    "block count")
            caps.append(check_capacity(blocks))
            continue
        match = _CAPACITY.match(item)
        if match is None:
            raise CapacityError(
                f"capacity {item.strip()!r} is not a block count; give integers such as 1000 or 10k, "
                "or a percentage of the trace's distinct blocks such as 5%"
            )
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit == "%":
            if not 0 < value <= 100:
                raise CapacityError(
                    f"capacity {item.strip()!r} is outside 0% < capacity <= 100% of the trace's distinct blocks "
                    + ("(a cache must hold at least one block)" if value <= 0 else
                       "(past 100% every block fits and every policy misses only on first use)")
                    + "; give a percentage such as 5%, or a block count such as 10k"
                )
            value = max(1.0, round(n_blocks * value / 100.0))
        else:
            value *= {"": 1, "k": 1_000, "m": 1_000_000}[unit]
        caps.append(check_capacity(int(value) if float(value).is_integer() else value))
    if not caps:
        raise CapacityError("no capacity given; pass --capacity 1000,10000 (or percentages like 5%)")
    return list(dict.fromkeys(caps))  # keep order, drop repeats


def fraction_capacities(n_blocks: int, fractions) -> list[int]:
    """Capacities at these fractions of the trace's distinct blocks, at least 1, sorted, no repeats."""
    return sorted({max(1, round(f * n_blocks)) for f in fractions})
