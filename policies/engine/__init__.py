"""The engine: replay one policy module over a prepared trace and turn hit flags into results.

It knows the kernel contract, not the policies: looking a policy up by name is the
registry's job (`policies.registry`, `policies.sweep`), one layer up, so nothing here
imports a policy. Also here: the capacity grammar, the one parameter discovery, the result
rows and their files (`results.py`, pure Python: `reports` reads them), and LRU curves.
Import from the modules: this package re-exports nothing.
"""
