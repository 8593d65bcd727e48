"""The front buffer: what a cache must offer for the threshold engine to hot-switch it.

A hybrid cache serves from its *front* metadata while the switch prepares a *back* buffer
from it; the switch then swaps the back in, or drops it and rolls back. The threshold
engine prices the switch by the entries it walks. Declared as a Protocol so the two
fronts (threshold.LirsBaseline before a switch, hybrid.HybridCache after one) are checked
against one interface rather than by convention.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["FrontBuffer"]


@runtime_checkable
class FrontBuffer(Protocol):
    """A cache's live metadata as seen by a hot switch."""

    evictions: int

    def entries(self) -> int:
        """Metadata entries a switch walks (resident and ghost)."""
        ...

    def back_buffer(self) -> Any:
        """The metadata the cache would serve from after a switch, built while this one serves."""
        ...

    def swap(self, back: Any) -> FrontBuffer:
        """Make `back` (from back_buffer) live; returns the cache that serves from now on."""
        ...
