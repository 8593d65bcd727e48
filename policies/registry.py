"""Every replacement policy the engine knows, by CLI name.

Each module in `MODULES` follows the kernel contract in
docs/CONTRACTS.md: `NAME`, `DESCRIPTION` and a numba `KERNEL(block, req_offsets, n_blocks,
capacity, hit, *params) -> (evictions, max_resident)`. To add a policy, write the module and
import it here and add it to `MODULES`.
"""
from __future__ import annotations

from types import ModuleType

from . import semantic_shard, sits
from .classic import arc, fifo, lfu, lirs, lru, prefix_lru, s3fifo, sieve, twoq
from .errors import PolicyEngineError

# The policy modules, in the order tables list them.
MODULES: tuple[ModuleType, ...] = (lru, fifo, lfu, sieve, lirs, arc, s3fifo, twoq, prefix_lru, sits, semantic_shard)


class UnknownPolicyError(PolicyEngineError):
    """A policy name the registry does not know."""


def _load() -> dict[str, ModuleType]:
    policies: dict[str, ModuleType] = {}
    for module in MODULES:
        for attr in ("NAME", "DESCRIPTION", "KERNEL"):
            if not hasattr(module, attr):
                raise TypeError(f"policy module {module.__name__} lacks {attr} (docs/CONTRACTS.md)")
        if module.NAME in policies:
            raise TypeError(f"policy name {module.NAME!r} registered twice")
        policies[module.NAME] = module
    return policies


POLICIES: dict[str, ModuleType] = _load()


def policy_names() -> list[str]:
    """CLI names of every registered policy, in table order."""
    return list(POLICIES)


def get_policy(name: str) -> ModuleType:
    """The policy module registered as `name` (case-insensitive); UnknownPolicyError otherwise."""
    key = name.strip().lower()
    try:
        return POLICIES[key]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose from {', '.join(POLICIES)}"
        ) from None
