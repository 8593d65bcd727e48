"""Issue 20 item 2: measuring needs only numpy, pandas, pyarrow, click, rich and nvidia-ml-py.

The lent node's image has no plotly, and the device check must not stop for it (or for
prometheus-client, or pytest). Each case runs sitsprof in a fresh interpreter whose importer
refuses plotly, prometheus_client and pytest, and also numba, jinja2, cupti and cuda (the
policy kernels, the HTML template and the CUPTI binding are not on the dry run's or the
figures' path either), with a `sys.meta_path` finder raising ImportError (what a venv without
them gives), on the demo's synthetic run (`reports.demo.synthetic_run`, the
directory `sitsprof demo` writes), and checks the exit status and the output, not just that
nothing crashed.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKED = ("plotly", "prometheus_client", "pytest", "_pytest", "numba", "jinja2", "cupti", "cuda")

_RUNNER = textwrap.dedent("""
    import sys
    BLOCKED = set(sys.argv[1].split(","))
    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None
    sys.meta_path.insert(0, Refuse())
    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]
    from sitsprof.cli.main import main
    sys.argv = ["sitsprof", *sys.argv[2:]]
    try:
        main()
    finally:
        leaked = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
        print("LEAKED", leaked if leaked else "none")
    """)


def _sitsprof(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _RUNNER, ",".join(BLOCKED), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    from sitsprof.reports.demo import synthetic_run

    return synthetic_run(tmp_path_factory.mktemp("demo"))


def test_the_blocker_bites(tmp_path):
    """The control: the HTML report does need plotly, and the blocked import says so."""
    proc = subprocess.run([sys.executable, "-c", _RUNNER.replace("from sitsprof.cli.main import main",
                                                                 "import plotly; main = None"),
                           ",".join(BLOCKED)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "No module named 'plotly' (blocked by the test)" in proc.stderr


def test_run_dry_run_needs_no_plotly_prometheus_or_pytest(tmp_path):
    proc = _sitsprof("run", "--dry-run", "--clocks", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr  # the plan goes to stderr (the console), like every status line
    assert "quick suite on GPU 0" in said and "nothing launched" in said
    assert "LEAKED none" in proc.stdout


def test_probe_figures_on_the_demo_synthetic_run_needs_none_of_them(demo_run, tmp_path):
    proc = _sitsprof("probe", "figures", str(demo_run), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("SYNTHETIC: this run was generated")
    for line in ("l2_near", "hbm", "copy kernel", "loaded latency", "far-L2 band < HBM p1 <= evicted",
                 "level  hot p99  hbm p1  cut(s)       separation  re-touches  far band (p50)  evicted"):
        assert line in out, line
    assert "LEAKED none" in out
