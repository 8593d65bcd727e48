"""The serving replay's policy names, without the kernels: `policy replay` checks `-p` before
the trace is read and before numba is imported (a bad option fails in well under a second).
evictors.POLICY_IDS maps the same names to the kernels' ids; tests/test_replay_cli.py holds
the two lists equal."""
from __future__ import annotations

__all__ = ["SERVING_POLICIES", "SGLANG_POLICIES", "serving_names"]

#: In evictors.POLICY_IDS order (what `-p all` replays).
SERVING_POLICIES = ("lru", "fifo", "sieve", "s3fifo", "arc", "lirs", "lfu", "sits")
#: Policies --engine sglang serves: SGLang 0.5.23's own eviction strategies (evict_policy.py)
#: over its radix tree's leaf nodes; radix.RADIX_POLICIES, held equal by tests.
SGLANG_POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority")


def serving_names(text: str) -> list[str]:
    """`-p` text -> policy names (case, '-' and '_' alike; `all` is every serving policy)."""
    names = [p.strip().lower().replace("-", "").replace("_", "") for p in str(text).split(",") if p.strip()]
    if names == ["all"]:
        return list(SERVING_POLICIES)
    return names
