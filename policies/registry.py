"""Every replacement policy the engine knows, by CLI name: the top of the policy engine.

Each module in `MODULES` follows the policy contract in docs/CONTRACTS.md: `NAME`,
`DESCRIPTION` and `KERNEL(block, req_offsets, n_blocks, capacity, hit, *params) ->
(evictions, max_resident)`, a numba function for the classic policies; the adaptive ones
also expose `run(trace, capacity, **PARAMS)`. Nothing listed here imports this module. To
add a policy, write the module, import it here and add it to `MODULES`.
"""
from __future__ import annotations

from types import ModuleType

from .adaptive import semantic_shard, sits
from .classic import arc, belady, fifo, lfu, lirs, lru, prefix_lru, s3fifo, sieve, twoq
from .errors import UnknownPolicyError

# The policy modules, in the order tables list them; belady (offline optimal) last, as the headroom line.
MODULES: tuple[ModuleType, ...] = (lru, fifo, lfu, sieve, lirs, arc, s3fifo, twoq, prefix_lru, sits, semantic_shard,
                                   belady)


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


def select_policies(text: str) -> list[str]:
    """`lru,arc` or `all` -> registered policy names, without repeats (UnknownPolicyError names the choices)."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    if not names or names == ["all"]:
        return policy_names()
    return list(dict.fromkeys(get_policy(name).NAME for name in names))
