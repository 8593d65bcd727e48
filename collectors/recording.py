"""The one recording skeleton shared by `sitsprof record` and `sitsprof run`.

Both make a run directory, lock (or only watch) the clocks, record the clock sync, run the
samplers around some work, and must undo all of it in the right order however the work ends:
samplers stopped and flushed while the clocks are still as locked, then the clocks restored,
then what the restore did written to meta.json (in a `finally`, so an interrupted run says
whether its clocks came back), and only then the run marked. Two copies of that order had
drifted apart; `recording()` is the only one.

SIGINT/SIGTERM act at once while the work runs; outside it (set-up, and the whole way down
from stopping the samplers to marking the run) they wait and act once the run says how it
ended, so no signal, wherever it lands, leaves a run `running`. On a full disk the teardown's
meta.json updates stay in memory for the last meta.json (which has room kept for it), and rows
the samplers could not write end the run `failed` with one line saying so.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sitsprof.collectors.errors import RunWriteError
from sitsprof.collectors.recorder import Recorder, build_samplers
from sitsprof.collectors.rundir import RunDirectory

__all__ = ["Recording", "recording"]

if TYPE_CHECKING:
    from sitsprof.pmu.clocks import ClockSession


@dataclass
class Recording:
    """What `recording()` yields: the run directory, the clock session and the running samplers."""

    run: RunDirectory
    session: ClockSession
    recorder: Recorder
    _outcome: dict = field(default_factory=dict)

    def set_outcome(self, **fields) -> None:
        """Fields for meta.json written once the clocks are restored, before the run is marked;
        only when the block ends without an exception."""
        self._outcome.update(fields)


@contextmanager
def recording(parent, name: str | None, kind: str, meta: dict, device_index: int = 0, clocks: str = "none",
              sm="max", memory=None, nvml_interval_s: float = 0.01, nvml_groups=None, gpm: bool = True,
              gpm_interval_s: float = 0.2,
              cupti: bool = False, cupti_interval_ns: int = 100_000, flush_every_s: float = 1.0,
              optional: tuple[str, ...] = ()):
    """Record into a new run directory `parent/name` for the duration of the block; yields a `Recording`.

    meta.json starts as {"kind": kind, "device": <device facts>, **meta}. `clocks`, `sm` and
    `memory` go to `pmu.clocks.locked_clocks` (mode, SM and memory clock). Samplers named in
    `optional` that cannot start are skipped with the reason. SIGTERM and SIGHUP end the block
    like Ctrl-C does, so everything is restored and the run is marked interrupted."""
    from sitsprof.collectors.clocksync import clock_sync
    from sitsprof.common.signals import signals_deferred, terminate_raises
    from sitsprof.pmu.clocks import locked_clocks
    from sitsprof.pmu.device import choose_device, device_facts
    from sitsprof.pmu.tenants import compute_apps

    # device_index is CUDA's (as the probes, clock sync and CUPTI use it); NVML's may differ
    choice = choose_device(device_index)
    facts = {**device_facts(choice.nvml_index), "device_choice": choice.describe()}
    # the GPU's other processes, before and after (read only; issue 20.4): a co-tenant shows here
    apps = {"before": compute_apps(facts.get("uuid"))}
    session = None
    with terminate_raises(), signals_deferred() as deferred:
        run = RunDirectory.create(parent, name, meta={"kind": kind, "device": facts, "compute_apps": apps, **meta})
        with run:
            try:
                with locked_clocks(choice.nvml_index, sm=sm, memory=memory, mode=clocks) as session:
                    run.update_meta(clocks=session.to_dict(), clock_sync=clock_sync(device_index if cupti else None))
                    samplers = build_samplers(device_index, nvml_interval_s, gpm, gpm_interval_s, cupti=cupti,
                                              cupti_interval_ns=cupti_interval_ns, nvml_groups=nvml_groups)
                    recorder = Recorder(run, samplers, flush_every_s)
                    recorder.start(optional=optional)
                    rec = Recording(run, session, recorder)
                    try:
                        with deferred.released():
                            yield rec
                    finally:
                        _keep(run, samplers=recorder.stop())
            finally:
                # after the lock is released, even on an exception and before the run is marked:
                # what was restored, clocks after
                if session is not None:
                    _keep(run, clocks=session.to_dict())
                _keep(run, compute_apps={**apps, "after": compute_apps(facts.get("uuid"))})
            if rec._outcome:
                _keep(run, **rec._outcome)
            recorder.raise_if_lost()


def _keep(run: RunDirectory, **fields) -> None:
    """A teardown meta.json update: on a disk that fails it stays in memory for `finish()` to
    write, and does not hide how the work ended."""
    try:
        run.update_meta(**fields)
    except RunWriteError:
        pass
