"""The SITS cache: ARC's four lists served either as one LRU list (recency) or as ARC (scan).

A switch between the two behaviours is a flip of a flag over the same lists, so every
resident block stays; see sits.py for when it flips. The loop is arc.replay_window (via
replay_scan / replay_recency), the same code as the ARC kernel. Its own module because both
the SITS run and the threshold engine (which builds one from LIRS state) need it.
"""
from __future__ import annotations

import numpy as np

from ..classic.arc import SCAN, new_state, replay_recency, replay_scan

__all__ = ["HybridCache"]

_T1, _T2 = 0, 1  # list codes in `where` (arc.py)


class HybridCache:
    """The SITS cache's metadata (ARC's four lists and p), resumable window by window; the loop
    is arc.replay_window (via replay_scan / replay_recency), the same code as the ARC kernel."""

    # Everything a switch must copy (arc.new_state).
    BUFFERS = ("prev", "nxt", "where", "ends", "sizes", "state")

    def __init__(self, n_blocks: int, capacity: int):
        self.capacity = int(capacity)
        self.prev, self.nxt, self.where, self.ends, self.sizes, self.state = new_state(n_blocks)
        self.evictions = 0

    def snapshot(self) -> dict:
        """A copy of the metadata (the back buffer of a double-buffered switch)."""
        return {name: getattr(self, name).copy() for name in self.BUFFERS}

    def adopt(self, buffers: dict) -> None:
        """Make `buffers` (from snapshot) the live metadata."""
        for name in self.BUFFERS:
            setattr(self, name, buffers[name])

    # the front-buffer protocol (front.FrontBuffer)
    back_buffer = snapshot

    def swap(self, back: dict) -> HybridCache:
        self.adopt(back)
        return self

    def entries(self) -> int:
        """Metadata entries a switch walks: resident and ghost."""
        return int(np.sum(self.sizes))

    def replay(self, block, lo, hi, behaviour, hit) -> int:
        loop = replay_scan if behaviour == SCAN else replay_recency
        e = loop(block, lo, hi, self.prev, self.nxt, self.where, self.ends, self.sizes, self.state, self.capacity, hit)
        self.evictions += int(e)
        return int(e)

    @property
    def resident(self) -> int:
        return int(self.sizes[_T1] + self.sizes[_T2])

    def resident_blocks(self) -> np.ndarray:
        return np.flatnonzero((self.where == _T1) | (self.where == _T2))
