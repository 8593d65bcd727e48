"""GPU side of the probes: CuPy launchers of kernels/*.cu.

CuPy is imported inside `import_cupy()` only; without it, or without a GPU and driver, the
user gets `NoGpuError` (one line, exit status 2). Kernel scalar arguments are passed as
explicit NumPy scalars (np.uint32 / np.uint64) to match the C signatures byte for byte.
Every plan is validated against the device (`plan.validate`) before the first launch.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from functools import cache
from typing import Callable

import numpy as np

from sitsprof.pmu.errors import NoGpuError

from . import tables
from .kernels import NVCC_OPTIONS, kernel_constants, kernel_source
from .plan import (LINE_BYTES, BandwidthPlan, ChaseSweep, DeviceLimits, LatencyPlan, LoadedPlan, StreamConfig,
                   TlbPlan)

Progress = Callable[[int], None]  # advance(n) callback
U64_MAX = np.uint64(2**64 - 1)
READY_TIMEOUT_NS = 50_000_000


def import_cupy():
    """CuPy with at least one visible GPU, or NoGpuError saying what is missing."""
    try:
        import cupy as cp
    except ImportError as exc:
        raise NoGpuError("the probes need CuPy to run their kernels and it is not installed; "
                         "install the gpu extra (pip install 'sitsprof[gpu]', i.e. cupy-cuda13x)") from exc
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError, or a missing libcuda
        raise NoGpuError(f"no usable NVIDIA GPU/driver for CuPy ({exc}); run the probes on a machine with an "
                         "NVIDIA GPU and driver") from exc
    if count < 1:
        raise NoGpuError("CuPy sees no NVIDIA GPU; run the probes on a machine with one")
    return cp


@cache
def load_module(name: str):
    """CuPy RawModule of `kernels/<name>.cu`, compiled by NVRTC for the current device.

    CuPy chooses the device's `-arch` itself; the options match NVCC_OPTIONS.
    """
    cp = import_cupy()
    return cp.RawModule(code=kernel_source(name), options=NVCC_OPTIONS, name_expressions=None)


def _control_words() -> tuple[int, int, int, int]:
    """Indices of the loaded-latency control words (kernels/loaded.cu), from the kernel text."""
    k = kernel_constants()
    return k["CTL_READY"], k["CTL_PROBE_SM"], k["CTL_STARTED"], k["CTL_LEFT"]


def device_limits(index: int = 0) -> DeviceLimits:
    """Planning facts from the CUDA runtime (free memory after CuPy's pool gives back its blocks)."""
    cp = import_cupy()
    if index >= cp.cuda.runtime.getDeviceCount():
        raise NoGpuError(f"there is no GPU {index}; CuPy sees {cp.cuda.runtime.getDeviceCount()}")
    with cp.cuda.Device(index):
        cp.get_default_memory_pool().free_all_blocks()
        props = cp.cuda.runtime.getDeviceProperties(index)
        free, total = cp.cuda.runtime.memGetInfo()
    name = props["name"]
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return DeviceLimits(name=name, index=index, compute_capability=(int(props["major"]), int(props["minor"])),
                        sm_count=int(props["multiProcessorCount"]), l2_bytes=int(props["l2CacheSize"]),
                        memory_bytes=int(total), free_bytes=int(free))


def _noop(n: int) -> None:
    return None


class Probes:
    """One GPU's probe session: compiled kernels, the measured SM clock and timer overhead."""

    def __init__(self, index: int = 0):
        self.cp = import_cupy()
        self.index = index
        self.cp.cuda.Device(index).use()
        self.limits = device_limits(index)
        self.mhz: float | None = None
        self.overhead: dict | None = None
        self._sm_ids: np.ndarray | None = None  # learnt on first use (sm_ids)
        self._sink = self.cp.zeros(4, dtype=self.cp.uint64)

    # -- basics -----------------------------------------------------------------------------
    def kernel(self, module: str, name: str):
        return load_module(module).get_function(name)

    def refresh_limits(self) -> DeviceLimits:
        self.limits = device_limits(self.index)
        return self.limits

    def calibrate(self, spin_ns: int = 20_000_000, timer_samples: int = 4096) -> dict:
        """Measure the SM clock (clock64 against %globaltimer) and the timer overhead."""
        cp = self.cp
        out = cp.zeros(2, dtype=cp.uint64)
        self.kernel("chase", "sm_clock_rate")((1,), (1,), (np.uint64(spin_ns), out))
        ns, cycles = (int(x) for x in out.get())
        self.mhz = tables.sm_clock_mhz(ns, cycles)
        lat = cp.empty(timer_samples, dtype=cp.uint32)
        self.kernel("chase", "timer_overhead")((1,), (1,), (np.uint32(timer_samples), lat, self._sink))
        self.overhead = tables.timer_overhead(lat.get())
        return {"sm_clock_mhz": self.mhz, "timer_overhead_cycles": self.overhead["median"],
                "timer_overhead": self.overhead, "clock_spin_ns": ns, "clock_spin_cycles": cycles}

    def build_ring(self, buf, links: int, stride: int, skew: int = 0, seed: int = 0) -> int:
        """Write a random ring of `links` links into `buf`; returns the start address."""
        cp = self.cp
        order = cp.random.RandomState(seed).permutation(links).astype(cp.uint64)
        threads = 256
        blocks = int(min((links + threads - 1) // threads, 8192))
        self.kernel("chase", "chase_init")((blocks,), (threads,),
                                           (buf, order, np.uint64(links), np.uint64(stride), np.uint64(skew)))
        first = int(order[0].get())
        del order
        return int(buf.data.ptr) + int(tables.link_offset(first, stride, skew))

    def chase(self, variant: str, start: int, warm: int, n: int, gap_ns: int = 0) -> np.ndarray:
        """Raw per-access cycle counts of one chase (`ca` default caching, `cg` L1 bypass)."""
        cp = self.cp
        lat = cp.empty(n, dtype=cp.uint32)
        name = {"ca": "chase_ca", "cg": "chase_cg"}[variant]
        self.kernel("chase", name)((1,), (1,), (np.uint64(start), np.uint32(warm), np.uint32(n),
                                                np.uint32(gap_ns), lat, self._sink))
        return lat.get()

    def sm_ids(self) -> np.ndarray:
        """The distinct %smid values blocks run on (they need not be 0..sm_count-1), sorted."""
        if self._sm_ids is None:
            cp = self.cp
            grid = 4 * max(self.limits.sm_count, 1)
            smids = cp.zeros(grid, dtype=cp.uint32)
            work = cp.zeros(1, dtype=cp.uint64)
            dst = cp.zeros(16, dtype=cp.uint8)
            # n_vec = 0: every block records its SM, claims nothing and leaves
            self.kernel("bandwidth", "bw_write")((grid,), (512,), (dst, np.uint64(0), np.uint32(0), np.uint32(0),
                                                                   np.uint32(0xFFFFFFFF), smids, work))
            self._sm_ids = np.unique(smids.get())
        return self._sm_ids

    def sm_threshold(self, active_sms: int) -> int:
        """The %smid bound that keeps exactly the `active_sms` lowest-numbered SMs working."""
        ids = self.sm_ids()
        return 0xFFFFFFFF if active_sms >= ids.size else int(ids[active_sms - 1]) + 1

    def _need_calibration(self) -> None:
        if self.mhz is None or self.overhead is None:
            self.calibrate()

    def _sweep_frames(self, sweep: ChaseSweep, variants, progress: Progress, buf=None) -> dict:
        import pandas as pd

        cp = self.cp
        buf = cp.empty(sweep.buffer_bytes, dtype=cp.uint8) if buf is None else buf
        frames = {v: [] for v in variants}
        for i, fp in enumerate(sweep.footprints):
            links = sweep.links(fp)
            start = self.build_ring(buf, links, sweep.stride, sweep.skew, seed=sweep.seed + i)
            for v in variants:
                raw = self.chase(v, start, sweep.warm(fp), sweep.samples)
                frames[v].append(tables.chase_frame(raw, self.overhead["median"], self.mhz, variant=v,
                                                      stride_bytes=sweep.stride, footprint_bytes=fp))
                progress(1)
        del buf
        cp.get_default_memory_pool().free_all_blocks()
        return {v: pd.concat(f, ignore_index=True) for v, f in frames.items()}

    # -- probes -------------------------------------------------------------------------------
    def latency(self, plan: LatencyPlan, progress: Progress = _noop) -> dict:
        """Latency ladder -> {'latency': default-cached samples, 'latency_cg': L1-bypassing samples}."""
        plan.validate(self.refresh_limits())
        self._need_calibration()
        frames = self._sweep_frames(plan.sweep, plan.variants, progress)
        names = {"ca": "latency", "cg": "latency_cg"}
        return {names[v]: f for v, f in frames.items()}

    def tlb(self, plan: TlbPlan, progress: Progress = _noop):
        """TLB sweep -> one table of samples over (stride, footprint)."""
        import pandas as pd

        plan.validate(self.refresh_limits())
        self._need_calibration()
        parts = [self._sweep_frames(s, ("cg",), progress)["cg"] for s in plan.sweeps]
        return pd.concat(parts, ignore_index=True)

    def bandwidth(self, plan: BandwidthPlan, progress: Progress = _noop):
        """Streaming kernels at each intensity, and cudaMemcpy D2D on the same buffers."""
        import pandas as pd

        cp = self.cp
        plan.validate(self.refresh_limits())
        src = cp.zeros(plan.buffer_bytes, dtype=cp.uint8)
        dst = cp.zeros(plan.buffer_bytes, dtype=cp.uint8)
        stream = cp.cuda.Stream(non_blocking=True)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        rows = []

        def timed(launch) -> float:
            launch(0)  # warm-up launch, untimed
            e0.record(stream)
            launch(1)
            e1.record(stream)
            e1.synchronize()
            return cp.cuda.get_elapsed_time(e0, e1) / 1e3

        work = cp.zeros(2, dtype=cp.uint64)  # claim counters: warm-up launch, timed launch
        for cfg in plan.configs:
            nvec = cfg.claim_vectors(plan.buffer_bytes)
            grid = cfg.grid(self.limits.sm_count)
            smids = cp.zeros(grid, dtype=cp.uint32)
            below = np.uint32(self.sm_threshold(cfg.active_sms))
            common = (np.uint64(nvec), np.uint32(plan.passes), np.uint32(cfg.throttle_ns), below, smids)
            args = {"read": (src,) + common, "write": (dst,) + common, "copy": (src, dst) + common}
            for kernel in plan.kernels:
                fn = self.kernel("bandwidth", f"bw_{kernel}")

                def launch(which: int, fn=fn, a=args[kernel], kernel=kernel):
                    counter = work[which:which + 1]
                    with stream:
                        fn((grid,), (cfg.threads,), a + (counter,) + ((self._sink,) if kernel == "read" else ()))

                for rep in range(plan.reps):
                    work.fill(0)
                    cp.cuda.runtime.deviceSynchronize()  # `stream` does not wait for the legacy stream
                    seconds = timed(launch)
                    used = smids.get()
                    nbytes = tables.bytes_moved(kernel, nvec, plan.passes)
                    rows.append({"kernel": kernel, "active_sms": cfg.active_sms, "blocks_per_sm": cfg.blocks_per_sm,
                                 "blocks": int(np.sum(used != 0xFFFFFFFF)), "threads": cfg.threads,
                                 "throttle_ns": cfg.throttle_ns,
                                 "sms_used": int(np.unique(used[used != 0xFFFFFFFF]).size), "rep": rep,
                                 "bytes": nbytes, "seconds": seconds, "achieved_gbs": nbytes / seconds / 1e9})
                progress(1)
        nbytes_one = plan.buffer_bytes

        def memcpy(which: int):
            for _ in range(plan.passes):
                cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes_one,
                                            cp.cuda.runtime.memcpyDeviceToDevice, stream.ptr)

        for rep in range(plan.reps):
            seconds = timed(memcpy)
            nbytes = tables.bytes_moved("memcpy", nbytes_one // 16, plan.passes)
            rows.append({"kernel": "memcpy", "active_sms": 0, "blocks_per_sm": 0, "blocks": 0, "threads": 0,
                         "throttle_ns": 0, "sms_used": 0, "rep": rep, "bytes": nbytes, "seconds": seconds,
                         "achieved_gbs": nbytes / seconds / 1e9})
        progress(1)
        src = dst = None  # free the buffers (the memcpy closure above reads these names)
        cp.get_default_memory_pool().free_all_blocks()
        return pd.DataFrame(rows)

    # -- loaded latency -------------------------------------------------------------------------
    def _control(self, probe_present: bool):
        cp = self.cp
        ready, probe_sm, _, _ = _control_words()
        ctl = np.zeros(8, dtype=np.uint32)
        ctl[probe_sm] = 0xFFFFFFFF
        ctl[ready] = 0 if probe_present else 1
        stats = np.array([0, U64_MAX, 0, 0, 0], dtype=np.uint64)
        return cp.asarray(ctl), cp.asarray(stats)

    def _saturate(self, cfg: StreamConfig, bufs: tuple, nvec: int, sleep_ns: int, below: int, ctl, stats,
                  max_ns: int):
        """saturator_read (bufs = (src,)) or saturator_copy (bufs = (src, dst))."""
        name = "saturator_read" if len(bufs) == 1 else "saturator_copy"
        tail = (self._sink,) if len(bufs) == 1 else ()
        self.kernel("loaded", name)((cfg.grid(self.limits.sm_count),), (cfg.threads,),
                                    bufs + (np.uint64(nvec), np.uint32(sleep_ns), np.uint32(below), ctl, stats,
                                            np.uint64(max_ns)) + tail)

    def loaded(self, plan: LoadedPlan, progress: Progress = _noop) -> dict:
        """Loaded latency -> {'loaded': per-sample rows, 'loaded_calibration': saturator alone}."""
        import pandas as pd

        cp = self.cp
        plan = plan.for_device(self.refresh_limits())
        plan.validate(self.limits)
        self._need_calibration()
        cfg = plan.saturator
        sat = tuple(cp.zeros(plan.saturator_bytes, dtype=cp.uint8)
                    for _ in range(2 if plan.saturator_kind == "copy" else 1))
        nvec = cfg.vectors(plan.saturator_bytes, self.limits.sm_count)
        below = self.sm_threshold(cfg.active_sms)  # learnt here, not inside the streams below
        # 1. the saturator alone at each throttle: bandwidth against sleep per iteration
        cal = []
        for sleep in plan.calibration_sleeps_ns:
            ctl, stats = self._control(probe_present=False)
            self._saturate(cfg, sat, nvec, sleep, below, ctl, stats, plan.calibration_ns)
            cp.cuda.runtime.deviceSynchronize()
            cal.append({"saturator": plan.saturator_kind, "throttle_ns": int(sleep),
                        "achieved_gbs": tables.saturator_gbs(stats.get()),
                        "blocks": cfg.grid(self.limits.sm_count), "threads": cfg.threads})
        progress(1)
        cal_frame = pd.DataFrame(cal)
        peak = float(cal_frame["achieved_gbs"].max())
        sleeps = tables.choose_throttles(cal_frame["throttle_ns"], cal_frame["achieved_gbs"],
                                           [t * peak for t in plan.targets])
        # 2. the two chases: (a) HBM misses, (b) re-touches of an L2-resident set
        hbm_buf = cp.empty(plan.hbm_footprint, dtype=cp.uint8)
        ret_buf = cp.empty(plan.retouch_bytes, dtype=cp.uint8)
        chases = {
            "hbm": (self.build_ring(hbm_buf, plan.hbm_footprint // LINE_BYTES, LINE_BYTES, seed=plan.seed),
                    min(plan.samples, plan.hbm_footprint // LINE_BYTES), 0),
            "retouch": (self.build_ring(ret_buf, plan.retouch_bytes // LINE_BYTES, LINE_BYTES, seed=plan.seed + 1),
                        plan.retouch_bytes // LINE_BYTES, plan.retouch_gap_ns),
        }
        probe_fn = self.kernel("loaded", "loaded_chase")
        s_probe = cp.cuda.Stream(non_blocking=True)
        s_sat = cp.cuda.Stream(non_blocking=True)
        frames = []
        _, ctl_probe_sm, ctl_started, ctl_left = _control_words()
        levels = [(0, 0.0, 0)] + [(i + 1, t, s) for i, (t, s) in enumerate(zip(plan.targets, sleeps))]
        for level, target, sleep in levels:
            for access, (start, warm, gap) in chases.items():
                ctl, stats = self._control(probe_present=True)
                lat = cp.empty(plan.samples, dtype=cp.uint32)
                loaded = level > 0
                # the non-blocking streams do not wait for the copies that filled ctl and stats
                cp.cuda.runtime.deviceSynchronize()
                with s_probe:  # the probe first: it publishes its SM before the saturator looks
                    probe_fn((1,), (1,), (np.uint64(start), np.uint32(warm), np.uint32(plan.samples),
                                          np.uint32(gap), lat, self._sink, ctl, stats, np.uint32(loaded),
                                          np.uint64(plan.settle_ns), np.uint64(READY_TIMEOUT_NS)))
                if loaded:
                    with s_sat:
                        self._saturate(cfg, sat, nvec, sleep, below, ctl, stats, plan.max_ns)
                s_probe.synchronize()
                s_sat.synchronize()
                c, st = ctl.get(), stats.get()
                gbs = tables.saturator_gbs(st) if loaded else 0.0
                frame = tables.chase_frame(lat.get(), self.overhead["median"], self.mhz, level=level,
                                             target_fraction=target, throttle_ns=int(sleep), access=access,
                                             achieved_gbs=gbs, bandwidth_fraction=gbs / peak if peak else 0.0,
                                             probe_sm=int(c[ctl_probe_sm]),
                                             saturator_blocks=int(c[ctl_started]),
                                             blocks_left_probe_sm=int(c[ctl_left]),
                                             footprint_bytes=(plan.hbm_footprint if access == "hbm"
                                                              else plan.retouch_bytes))
                frames.append(frame)
            progress(1)
        del sat, hbm_buf, ret_buf
        cp.get_default_memory_pool().free_all_blocks()
        return {"loaded": pd.concat(frames, ignore_index=True), "loaded_calibration": cal_frame, "peak_gbs": peak}


@contextmanager
def timed_phase(phases: list, name: str, t0_ns: int):
    """Append {'name', 'start_s', 'end_s'} around a block, in seconds since `t0_ns`, a
    `time.monotonic_ns()` reading (the samplers' clock, so phases line up with their `t_ns`)."""
    start = (time.monotonic_ns() - t0_ns) / 1e9
    try:
        yield
    finally:
        phases.append({"name": name, "start_s": start, "end_s": (time.monotonic_ns() - t0_ns) / 1e9})
