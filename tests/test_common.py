"""The shared grammars: one duration parser for `record` and the policy parameters (the union
of what each accepted before), one size parser, and their errors under the one base class."""
from __future__ import annotations

import pytest

from sitsprof.common.durations import DurationError, parse_duration
from sitsprof.common.errors import SitsprofError
from sitsprof.common.sizes import GiB, KiB, MiB, SizeError, format_size, parse_size


@pytest.mark.parametrize("text,seconds", [
    ("180", 180), ("180s", 180), ("3m", 180), ("3min", 180), ("1.5h", 5400), ("500ms", 0.5),
    ("10us", 1e-5), ("20ns", 2e-8), (" 2 MIN ", 120), ("0", 0), (42, 42), (0.25, 0.25),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "", "5 parsecs", "inf", "nan", "-1", "-2s", True, float("inf")])
def test_parse_duration_refuses(text):
    with pytest.raises(DurationError) as info:
        parse_duration(text)
    assert repr(text) in str(info.value) or str(text) in str(info.value)


def test_positive_durations_refuse_zero():
    assert parse_duration("10us", positive=True) == pytest.approx(1e-5)
    with pytest.raises(DurationError, match="must be positive"):
        parse_duration("0s", positive=True)


def test_sizes_round_trip():
    assert parse_size("1.5GiB") == 3 * GiB // 2 and parse_size("64kb") == 64 * KiB and parse_size(4096) == 4096
    assert format_size(2 * MiB) == "2 MiB" and format_size(100) == "100 B"
    with pytest.raises(SizeError, match="cannot read size"):
        parse_size("12 parsecs")


def test_errors_share_the_base_and_keep_value_error():
    for error in (DurationError, SizeError):
        assert issubclass(error, SitsprofError) and issubclass(error, ValueError)
    assert SitsprofError.exit_code == 2


@pytest.mark.parametrize("module,base,second", [
    ("sitsprof.pmu.errors", "PmuError", RuntimeError),
    ("sitsprof.collectors.errors", "CollectorError", RuntimeError),
    ("sitsprof.probes.errors", "ProbeError", ValueError),
    ("sitsprof.policies.errors", "PolicyEngineError", ValueError),
    ("sitsprof.reports.errors", "ReportError", Exception),
    ("sitsprof.calibration.errors", "CalibrationError", ValueError),
])
def test_every_package_error_base_is_a_sitsprof_error(module, base, second):
    import importlib

    errors = importlib.import_module(module)
    cls = getattr(errors, base)
    assert issubclass(cls, SitsprofError) and issubclass(cls, second) and cls.exit_code == 2
    for name in dir(errors):  # every error the module defines derives from its base
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            assert issubclass(obj, cls), name
