"""Every replacement policy the engine knows, by CLI name: the top of the policy engine.

Each module in `MODULES` follows the policy contract declared in `engine/protocol.py`
(`NAME`, `DESCRIPTION`, `KERNEL`; optionally `run` and `PARAMS`, `PARAM_RANGES`, a resumable
form), checked once as the module loads. Nothing listed here imports this module.

Loaded on demand (issue 14, start-up): `SPECS` names each policy and the module that
implements it, so `policy_names()`, `select_policies("all")` and a lookup by name need no
import, and `get_policy("lru")` imports the lru module alone: a command that replays one
policy does not import, or decorate, the kernels of the other eleven. `MODULES` and
`POLICIES` (every module) import them all on first use. `_import_all` holds the same
modules as plain import statements, so import-linter and tools/check_import_cycles.py see
the registry's real edges; tests/test_startup.py checks it lists exactly `SPECS`.

To add a policy, write the module, add its (NAME, module) to `SPECS` (table order) and its
import to `_import_all`.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from .engine.params import accepted, ranges
from .engine.protocol import capabilities, check_policy
from .errors import UnknownPolicyError

__all__ = [
    "ALIASES",
    "SPECS",
    "get_policy",
    "policy_catalog",
    "policy_names",
    "select_policies",
]

_PACKAGE = __name__.rsplit(".", 1)[0]  # sitsprof.policies

# (NAME, module under sitsprof.policies), in the order tables list them; belady (offline
# optimal) last, as the headroom line.
SPECS: tuple[tuple[str, str], ...] = (
    ("lru", "classic.lru"), ("fifo", "classic.fifo"), ("lfu", "classic.lfu"), ("sieve", "classic.sieve"),
    ("lirs", "classic.lirs"), ("arc", "classic.arc"), ("s3fifo", "classic.s3fifo"), ("2q", "classic.twoq"),
    ("prefix_lru", "classic.prefix_lru"), ("sits", "adaptive.sits"), ("semantic-shard", "adaptive.semantic_shard"),
    ("belady", "classic.belady"),
)


def _import_all() -> tuple[ModuleType, ...]:
    """Every policy module, imported (the static edges the layering checks read), in `SPECS` order."""
    from .adaptive import semantic_shard, sits
    from .classic import arc, belady, fifo, lfu, lirs, lru, prefix_lru, s3fifo, sieve, twoq

    return (lru, fifo, lfu, sieve, lirs, arc, s3fifo, twoq, prefix_lru, sits, semantic_shard, belady)


_MODULE_OF: dict[str, str] = {}
for _name, _path in SPECS:
    if _name in _MODULE_OF:
        raise TypeError(f"policy name {_name!r} registered twice")
    _MODULE_OF[_name] = f"{_PACKAGE}.{_path}"
_LOADED: dict[str, ModuleType] = {}


def _module(name: str) -> ModuleType:
    """The module registered as `name` (a registered NAME), imported and checked against the contract."""
    module = _LOADED.get(name)
    if module is None:
        module = importlib.import_module(_MODULE_OF[name])
        check_policy(module)  # the contract, once (engine/protocol.py)
        if name != module.NAME:
            raise TypeError(f"policy module {module.__name__} is NAME {module.NAME!r}, registered as {name!r}")
        _LOADED[name] = module
    return module


def _all_policies() -> dict[str, ModuleType]:
    return {name: _module(name) for name, _ in SPECS}


def __getattr__(attr: str):
    """`POLICIES` (name -> module) and `MODULES` (modules in table order): every policy, imported on first use."""
    if attr == "POLICIES":
        return _all_policies()
    if attr == "MODULES":
        return tuple(_all_policies().values())
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def _key(name: str) -> str:
    """A name as the lookup compares it: case and `-` / `_` ignored (`prefix-lru` is `prefix_lru`,
    `s3-fifo` is `s3fifo`)."""
    return str(name).strip().lower().replace("-", "").replace("_", "")


def _aliases() -> dict[str, str]:
    """Lookup key -> registered name: each policy's NAME and its module's name (`twoq` for 2q,
    `semantic_shard` for semantic-shard), compared by `_key`."""
    aliases: dict[str, str] = {}
    for name, path in SPECS:
        for alias in (name, path.rsplit(".", 1)[-1]):
            other = aliases.setdefault(_key(alias), name)
            if other != name:
                raise TypeError(f"policy alias {alias!r} names both {other!r} and {name!r}")
    return aliases


ALIASES: dict[str, str] = _aliases()


def policy_names() -> list[str]:
    """CLI names of every registered policy, in table order."""
    return [name for name, _ in SPECS]


def get_policy(name: str) -> ModuleType:
    """The policy module registered as `name`: case-insensitive, `-` and `_` alike, the module
    name too (`prefix-lru`, `PREFIX_LRU`, `twoq`); UnknownPolicyError otherwise. Imports that
    module only."""
    return _module(_registered(name))


def _registered(name: str) -> str:
    """The registered NAME `name` stands for (no import); UnknownPolicyError otherwise."""
    try:
        return ALIASES[_key(name)]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; choose from {', '.join(policy_names())} (- and _ alike)"
        ) from None


def policy_catalog() -> list[dict]:
    """Every policy as `policy list --json` prints it: name, the other names it answers to,
    description, kind (classic: block ids only; adaptive: the whole trace) and its parameters,
    each with its default and, where declared, its valid range and why."""
    out = []
    for name, module in _all_policies().items():
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
                    "kind": "adaptive" if capabilities(module).adaptive else "classic", "parameters": params})
    return out


def select_policies(text: str) -> list[str]:
    """`lru,arc` or `all` -> registered policy names, without repeats (UnknownPolicyError names the choices)."""
    names = [p.strip() for p in str(text).split(",") if p.strip()]
    if not names or [n.lower() for n in names] == ["all"]:
        return policy_names()
    return list(dict.fromkeys(_registered(name) for name in names))
