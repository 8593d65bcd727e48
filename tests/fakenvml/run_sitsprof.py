"""Run the `sitsprof` CLI with the fake NVML of tests/fake_nvml.py swapped in first.

Used by subprocess tests (signals, crashes) and the bench: `python run_sitsprof.py ARGS...`
with $SITSPROF_FAKE_NVML naming the fake's JSON state file.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fake_nvml  # noqa: E402

fake_nvml.install()
# as from an interactive shell: a test suite started in the background inherits SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)

from sitsprof.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
