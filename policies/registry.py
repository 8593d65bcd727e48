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
from .engine.params import accepted, ranges
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


def _key(name: str) -> str:
    """A name as the lookup compares it: case and `-` / `_` ignored (`prefix-lru` is `prefix_lru`,
    `s3-fifo` is `s3fifo`)."""
    return str(name).strip().lower().replace("-", "").replace("_", "")


def _aliases() -> dict[str, str]:
    """Lookup key -> registered name: each policy's NAME and its module's name (`twoq` for 2q,
    `semantic_shard` for semantic-shard), compared by `_key`."""
    aliases: dict[str, str] = {}
    for name, module in POLICIES.items():
        for alias in (name, module.__name__.rsplit(".", 1)[-1]):
            other = aliases.setdefault(_key(alias), name)
            if other != name:
                raise TypeError(f"policy alias {alias!r} names both {other!r} and {name!r}")
    return aliases


ALIASES: dict[str, str] = _aliases()


def policy_names() -> list[str]:
    """CLI names of every registered policy, in table order."""
    return list(POLICIES)


def get_policy(name: str) -> ModuleType:
    """The policy module registered as `name`: case-insensitive, `-` and `_` alike, the module
    name too (`prefix-lru`, `PREFIX_LRU`, `twoq`); UnknownPolicyError otherwise."""
    try:
        return POLICIES[ALIASES[_key(name)]]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose from {', '.join(POLICIES)} (- and _ alike)"
        ) from None


def policy_catalog() -> list[dict]:
    """Every policy as `policy list --json` prints it: name, the other names it answers to,
    description, kind (classic: block ids only; adaptive: the whole trace) and its parameters,
    each with its default and, where declared, its valid range and why."""
    out = []
    for name, module in POLICIES.items():
        declared = ranges(module)
        params = []
        for pname, default in accepted(module).items():
            entry = {"name": pname, "default": default}
            rule = declared.get(pname)
            if rule is not None:
                entry.update(range=rule.describe(pname), why=rule.why)
            params.append(entry)
        aliases = sorted({module.__name__.rsplit(".", 1)[-1], name.replace("-", "_"), name.replace("_", "-")} - {name})
        out.append({"name": name, "aliases": aliases, "description": module.DESCRIPTION,
                    "kind": "adaptive" if hasattr(module, "run") else "classic", "parameters": params})
    return out


def select_policies(text: str) -> list[str]:
    """`lru,arc` or `all` -> registered policy names, without repeats (UnknownPolicyError names the choices)."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    if not names or [n.lower() for n in names] == ["all"]:
        return policy_names()
    return list(dict.fromkeys(get_policy(name).NAME for name in names))
