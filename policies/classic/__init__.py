"""Classic replacement policies: one module per policy, each a compiled kernel over dense block ids.

A policy here sees only block ids and request offsets (the kernel contract in
docs/CONTRACTS.md), never a trace file, a clock or a cost, so the engine can replay any of
them the same way and compare them with libCacheSim reference by reference. This layer
imports nothing of `policies` but its own modules. Import from the modules
(`classic.lru.KERNEL`, ...): this package re-exports nothing.
"""
