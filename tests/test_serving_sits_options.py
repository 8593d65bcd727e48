"""`policy replay`'s sits-only options have one check (summary.sits_options), with or without
--instances: the same refusal naming the options given, and --window 0 reaches sits's own
check on both paths (the routed path used to drop a falsy value silently)."""
from __future__ import annotations

import pytest

from sitsprof.policies.errors import ServingReplayError
from sitsprof.policies.serving.summary import sits_options


def test_sits_options_passes_what_was_given():
    assert sits_options(["sits"]) == {}
    assert sits_options(["lru"]) == {}
    assert sits_options(["lru", "sits"], window_s=2.0, threshold=True) == {"window_s": 2.0, "threshold": True}
    assert sits_options(["sits"], window_s=0.0) == {"window_s": 0.0}
    assert sits_options(["sits"], sits={"threshold_windows": 3}) == {"sits": {"threshold_windows": 3}}
    with pytest.raises(ServingReplayError, match=r"--threshold, the SITS options drive -p sits only \(not -p lru\)"):
        sits_options(["lru"], threshold=True, sits={"threshold_windows": 3})


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from sitsprof.policies.traces.generator import generate_requests, write_mooncake_jsonl

    return write_mooncake_jsonl(generate_requests(seed=2, duration_s=10.0), tmp_path_factory.mktemp("o") / "w.jsonl")


@pytest.mark.parametrize("instances", [[], ["--instances", "2"]])
def test_one_refusal_with_or_without_instances(trace, capsys, instances):
    from sitsprof.cli.main import main

    assert main(["policy", "replay", str(trace), "-p", "lru,fifo", "--window", "2", *instances]) == 2
    err = capsys.readouterr().err
    assert "--window drive -p sits only (not -p lru,fifo): add sits to -p" in err
    assert main(["policy", "replay", str(trace), "-p", "sits", "-c", "200", "--window", "0", *instances]) == 2
    assert "window" in capsys.readouterr().err
