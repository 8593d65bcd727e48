"""The policy module contract (policies/engine/protocol.py): every registered module keeps it,
what the engine concludes from each module's names is what the modules are (checked here
against the module files' own definitions, read without the protocol), and a module that
breaks it is refused by name."""
from __future__ import annotations

import inspect
import types

import pytest

from sitsprof.policies.engine import protocol
from sitsprof.policies.registry import get_policy, policy_names


def _defines(module, name: str) -> bool:
    """Whether `name` is a module-level definition or assignment in the module's source."""
    src = inspect.getsource(module)
    return any(line.startswith((f"def {name}(", f"{name} =", f"{name}: ")) for line in src.splitlines())


@pytest.mark.parametrize("name", policy_names())
def test_every_registered_policy_keeps_the_contract(name):
    module = get_policy(name)
    caps = protocol.capabilities(module)
    assert caps is protocol.capabilities(module)  # read once
    assert caps.name == module.NAME == name
    assert caps.adaptive == _defines(module, "run") == (name in ("sits", "semantic-shard"))
    stream = protocol.stream_capabilities(module)
    form = stream.form
    assert stream.streams and form is not None  # every registered policy streams (docs/scale.md)
    assert (form is module) == (caps.stream_form is None)
    assert stream.by_request == (name == "prefix_lru")
    assert stream.needs_future == (name == "belady")
    assert stream.needs_times == (name in ("sits", "semantic-shard"))
    assert stream.finishes == _defines(form, "stream_finish")
    assert (stream.params is not None) == _defines(form, "STREAM_PARAMS")


def _module(**names):
    m = types.ModuleType("fake_policy")
    m.__dict__.update(names)
    return m


def _kernel(block, req_offsets, n_blocks, capacity, hit):
    return 0, 0


def test_a_module_breaking_the_contract_is_refused_by_name():
    with pytest.raises(TypeError, match="fake_policy lacks KERNEL"):
        protocol.check_policy(_module(NAME="fake", DESCRIPTION="x"))
    with pytest.raises(TypeError, match="run and PARAMS"):
        protocol.check_policy(_module(NAME="fake", DESCRIPTION="x", KERNEL=_kernel, run=lambda *a: None))
    with pytest.raises(TypeError, match="STREAM_FORM"):
        protocol.check_policy(_module(NAME="fake", DESCRIPTION="x", KERNEL=_kernel, STREAM_FORM=3))
    half = _module(NAME="half", DESCRIPTION="x", KERNEL=_kernel, new_stream_state=lambda *a: (),
                   stream_window=lambda *a: 0)
    half.__name__ = "half_policy"
    with pytest.raises(TypeError, match="half_policy: a resumable form has"):
        protocol.stream_capabilities(half)
    plain = _module(NAME="plain", DESCRIPTION="x", KERNEL=_kernel)
    plain.__name__ = "plain_policy"
    caps = protocol.stream_capabilities(plain)
    assert not caps.streams and caps.form is None and not protocol.capabilities(plain).adaptive
