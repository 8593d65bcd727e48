"""The samplers of one run and the thread that flushes them into its run directory.

Every `flush_every_s` the writer drains each sampler into
`samplers/<name>.parts/part-NNNNN.parquet` and refreshes the sampler stats in meta.json, so a
run killed with SIGKILL keeps all but the last second. A sampler that fails to write is noted
and recording goes on: losing one table must not lose the run.
"""
from __future__ import annotations

import threading

from sitsprof.collectors.errors import CollectorError
from sitsprof.collectors.rundir import RunDirectory
from sitsprof.pmu.errors import PmuError


class Recorder:
    """Runs samplers and flushes them into `run` until `stop()`."""

    def __init__(self, run: RunDirectory, samplers: list, flush_every_s: float = 1.0):
        self.run = run
        self.samplers = list(samplers)
        self.flush_every_s = flush_every_s
        self.skipped: dict[str, str] = {}
        self._stop = threading.Event()
        self._writer = None
        self.write_errors: list[str] = []

    def start(self, optional: tuple[str, ...] = ()) -> "Recorder":
        """Start each sampler; one named in `optional` that cannot start is skipped with the reason."""
        import pyarrow.parquet  # noqa: F401 - imported now, not in the first flush

        started = []
        for sampler in self.samplers:
            try:
                sampler.start()
            except (PmuError, CollectorError, ImportError) as exc:
                if sampler.name not in optional:
                    for other in started:
                        other.stop()
                    raise
                self.skipped[sampler.name] = str(exc)
                continue
            started.append(sampler)
        self.samplers = started
        self.run.update_meta(samplers_skipped=self.skipped, samplers=self._stats())
        self._writer = threading.Thread(target=self._write_loop, name="sitsprof-writer", daemon=True)
        self._writer.start()
        return self

    def _stats(self) -> dict:
        return {s.name: {**s.describe(), **s.stats()} for s in self.samplers}

    def flush(self) -> None:
        for sampler in self.samplers:
            try:
                columns = sampler.drain()
                if columns:
                    self.run.append_table(sampler.name, columns, kind="sampler")
            except Exception as exc:  # noqa: BLE001 - keep recording; report at the end
                self.write_errors.append(f"{sampler.name}: {type(exc).__name__}: {exc}")
        self.run.update_meta(samplers=self._stats())

    def _write_loop(self) -> None:
        while not self._stop.wait(self.flush_every_s):
            self.flush()

    def stop(self) -> dict:
        """Stop the samplers, flush the rest, record final stats; returns them."""
        for sampler in self.samplers:
            sampler.stop()
        self._stop.set()
        if self._writer is not None:
            self._writer.join()
        self.flush()
        stats = self._stats()
        if self.write_errors:
            self.run.update_meta(sampler_write_errors=self.write_errors)
        return stats


def build_samplers(device_index: int = 0, nvml_interval_s: float = 0.01, gpm: bool = True,
                   gpm_interval_s: float = 0.1, cupti: bool = False, cupti_interval_ns: int = 10_000,
                   nvml_groups=None) -> list:
    """The samplers a run asks for, not yet started: NVML always, GPM and CUPTI PM sampling when asked."""
    from sitsprof.collectors.nvml_sampler import DEFAULT_GROUPS, NvmlSampler

    samplers = [NvmlSampler(device_index, nvml_interval_s, nvml_groups or DEFAULT_GROUPS)]
    if gpm:
        from sitsprof.collectors.gpm_sampler import GpmSampler

        samplers.append(GpmSampler(device_index, gpm_interval_s))
    if cupti:
        from sitsprof.collectors.cupti_sampler import CuptiPmSampler

        samplers.append(CuptiPmSampler(device_index, cupti_interval_ns))
    return samplers
