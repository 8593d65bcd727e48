"""Shared test fixtures: GPU detection for `-m gpu` tests, the bundled Mooncake trace, the fake
NVML, the in-process CLI and the HTML reference scanner.

Helpers that several test modules use live here, as fixtures, so that no test module imports
another (the fakes, `fake_nvml.py` and `libcachesim_ref.py`, are plain modules beside them).
"""
from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import fake_nvml
import pytest

ROOT = Path(__file__).resolve().parent.parent
# A user's ahead-of-time kernel module (`sitsprof compile --aot`, common/aot.py) is not the
# suite's to use: every test, and every child it starts, runs numba's JIT unless it asks
# (tests/test_aot.py builds its own and clears this).
os.environ["SITSPROF_AOT"] = "0"
#: The Mooncake conversation trace shipped in the package (xz; `bundled:mooncake`; NOTICE has its source).
MOONCAKE = ROOT / "policies" / "data" / "mooncake_conversation.jsonl.xz"


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


CLOCK_CHANGES_ENV = "SITSPROF_ALLOW_CLOCK_CHANGES"


def pytest_collection_modifyitems(config, items):
    # tests that lock or reset clocks run only where the GPU's owner allows it (issue 10 item 1)
    if os.environ.get(CLOCK_CHANGES_ENV) != "1":
        skip_clocks = pytest.mark.skip(reason=f"changes GPU clocks; set {CLOCK_CHANGES_ENV}=1 to run it "
                                              "(only on a GPU whose clocks are yours to change)")
        for item in items:
            if "clock_changes" in item.keywords:
                item.add_marker(skip_clocks)
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
    """The real Mooncake conversation trace, as the repository ships it (compressed)."""
    assert MOONCAKE.exists(), f"the bundled Mooncake trace is missing: {MOONCAKE}"
    return MOONCAKE


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A fake H200 behind pynvml, its state in a file that child processes share."""
    path = fake_nvml.write_state(tmp_path / "fake-nvml.json")
    monkeypatch.setenv(fake_nvml.ENV, str(path))
    monkeypatch.setenv("SITSPROF_STATE_DIR", str(tmp_path / "state"))
    fake = fake_nvml.install(path)
    yield fake
    fake_nvml.uninstall()


@pytest.fixture
def cli(capsys):
    """`sitsprof ARGS...` in this process: `cli(*args) -> (exit code, stdout, stderr)`."""
    from sitsprof.cli.main import main

    def run(*args):
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


class HtmlRefs(HTMLParser):
    """Every URL-bearing attribute and every start tag of an HTML document."""

    def __init__(self, html: str):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.feed(html)
        self.external = [v for _, _, v in self.refs if not v.startswith("#")]
        for style in re.findall(r"<style[^>]*>(.*?)</style>", html, flags=re.S | re.I):
            self.external += re.findall(r"url\(([^)]*)\)", style) + re.findall(r"@import\s+([^;]+)", style)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "data", "poster", "action", "formaction") and value:
                self.refs.append((tag, name, value))
            if name == "style" and value and "url(" in value:
                self.refs.append((tag, name, value))


@pytest.fixture
def html_refs():
    """`html_refs(html)`: its tags and `external`, the URLs a browser would fetch (tag
    attributes plus CSS url(...) and @import in <style>)."""
    return HtmlRefs


@pytest.fixture(scope="session")
def compiled_cold_cache(tmp_path_factory) -> dict:
    """The environment of a numba cache that held nothing until `sitsprof compile -p lru -j 2`
    filled it (lru in this process, the serving replay in a worker), compiled once a session:
    the tests that check "after compile, the first run compiles nothing" (simulate,
    tests/test_compile_once.py; every replay form, tests/test_replay_cli.py) and the one that
    compiles fifo and sieve into a copy of it (tests/test_startup.py) share its one cold compile
    (~a minute of CPU on 2 cores each). Read it, never write to it: copy it first.

    Under pytest-xdist (`make test` runs `-n 2`) the workers share it too: the first to ask
    compiles it under a file lock in the run's shared temporary folder, the other waits for it
    and reads it, so the minute is paid once a run, not once per worker."""
    import subprocess
    import sys

    def compile_into(folder: Path) -> dict:
        cache = str(folder / "numba")
        env = dict(os.environ, SITSPROF_JIT="numba", SITSPROF_NUMBA_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache)
        sitsprof = os.path.join(os.path.dirname(sys.executable), "sitsprof")
        done = subprocess.run([sitsprof, "compile", "-p", "lru", "-j", "2", "--json"], env=env, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "serving replay" in done.stderr, done.stderr[-2000:]
        return {"SITSPROF_JIT": "numba", "SITSPROF_NUMBA_CACHE_DIR": cache, "NUMBA_CACHE_DIR": cache}

    return dict(os.environ, **once_per_run(tmp_path_factory, "cold-numba", compile_into))


def once_per_run(tmp_path_factory, name: str, make) -> dict:
    """`make(folder)` (a JSON-able dict) once a test run: in this process without pytest-xdist;
    with it, by the first worker to ask (under a file lock, in the folder the run's workers
    share), the others reading what it wrote."""
    import fcntl
    import json
    import tempfile

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, above each worker's popen-gwK/
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / f"{name}.json"
        if not done.exists():
            folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=shared))  # a worker that failed left its own
            done.write_text(json.dumps(make(folder)))
        return json.loads(done.read_text())
