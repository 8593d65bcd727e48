"""The fault-injection script in its bounded form (issue 12, "Must show"): kills at random
moments, a full tmpfs (where it can be mounted), corrupted run directories, fuzzed traces and
calibrations; no case may end in a traceback, an internal error, an unreadable run directory
or an error of more than one line or another status than 2."""
from __future__ import annotations

import time

import fault_injection
import pytest


@pytest.mark.slow
def test_fault_injection_quick_has_no_violations():
    started = time.monotonic()
    kinds = fault_injection.run_all(quick=True, seed=12)
    summary = "\n".join(fault_injection.summary_lines(kinds))
    print(summary)
    assert not [v for kind in kinds for v in kind.violations], summary
    by_name = {kind.name: kind for kind in kinds}
    assert by_name["kill"].cases == 3 and by_name["fuzz traces"].cases == 60
    assert by_name["corrupt run directories"].cases >= 4 * 15
    assert by_name["full disk"].cases or by_name["full disk"].skipped
    assert time.monotonic() - started < 60


def test_verdict_rules():
    """The script's own rule: exit 0 (strict JSON with --json) or one line and exit 2."""
    assert fault_injection.verdict(0, '{"a": 1}', "", json_out=True) is None
    assert "non-JSON" in fault_injection.verdict(0, '{"a": NaN}', "", json_out=True)
    assert fault_injection.verdict(2, "", "sitsprof: error: bad\n") is None
    assert "2 lines" in fault_injection.verdict(2, "", "a\nb\n")
    assert "want 0 or 2" in fault_injection.verdict(1, "", "sitsprof: error: x\n")
    assert fault_injection.verdict(1, "", "sitsprof: internal error: KeyError\n")
    assert fault_injection.verdict(0, "", "Traceback (most recent call last):\n")
