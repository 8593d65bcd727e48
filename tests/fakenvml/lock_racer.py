"""One contender of the clock-lock race (tests/test_pmu_lockrace.py).

`python lock_racer.py READ_FD RESULTS_DIR NAME CONTENDERS` with $SITSPROF_FAKE_NVML naming
the fake NVML's state file: imports everything and opens NVML first, says it is ready, then
blocks on one byte from the pipe READ_FD, which the test writes to every contender at once,
so all of them try `locked_clocks` within microseconds of each other. A contender that gets
the lock keeps it until every contender has written its result (so a loser cannot simply
take the lock after the winner let go); one that is refused records the error line.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fake_nvml  # noqa: E402

fake_nvml.install()

from sitsprof.pmu import clocks  # noqa: E402
from sitsprof.pmu.errors import PmuError  # noqa: E402


def _result(results: Path, name: str, outcome: dict) -> None:
    tmp = results / f".{name}.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), **outcome}))
    os.replace(tmp, results / f"{name}.result")


def main(read_fd: int, results: Path, name: str, contenders: int) -> int:
    clocks.read_clocks(0)  # NVML open before the start, so the race is only the lock itself
    (results / f"{name}.ready").touch()
    os.read(read_fd, 1)
    try:
        with clocks.locked_clocks(0, sm="max"):
            _result(results, name, {"outcome": "held"})
            deadline = time.monotonic() + 30
            while len(list(results.glob("*.result"))) < contenders and time.monotonic() < deadline:
                time.sleep(0.01)
    except PmuError as exc:
        _result(results, name, {"outcome": "refused", "message": str(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
