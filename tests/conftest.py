"""Shared test fixtures: GPU detection for `-m gpu` tests and the shared Mooncake trace."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"


def _gpu_absent_reason() -> str | None:
    """None when an NVIDIA GPU with a working driver is visible, else why not."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA driver/GPU: {exc}"
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return "NVML sees no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = _gpu_absent_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def mooncake_path() -> Path:
    """The real Mooncake conversation trace beside the checkout (skips where it is absent)."""
    if not MOONCAKE.exists():
        pytest.skip(f"shared Mooncake trace not found at {MOONCAKE}")
    return MOONCAKE
