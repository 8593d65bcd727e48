"""GPU side of the probes: CuPy launchers of kernels/*.cu.

CuPy is imported inside `import_cupy()` only; without it, or without a GPU and driver, the
user gets `NoGpuError` (one line, exit status 2). Kernel scalar arguments are passed as
explicit NumPy scalars (np.uint32 / np.uint64) to match the C signatures byte for byte.
Every plan is validated against the device (`plan.validate`) before the first launch.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from functools import cache

import numpy as np

from sitsprof.pmu.errors import NoGpuError

from . import tables
from .kernels import NVCC_OPTIONS, kernel_constants, kernel_source
from .plan import LINE_BYTES, BandwidthPlan, ChaseSweep, DeviceLimits, LatencyPlan, LoadedPlan, StreamConfig, TlbPlan

__all__ = [
    "CLOCK_WARM_NS",
    "L1_KERNELS",
    "U64_MAX",
    "Probes",
    "Progress",
    "device_limits",
    "import_cupy",
    "load_module",
    "timed_phase",
]

Progress = Callable[[int], None]  # advance(n) callback
U64_MAX = np.uint64(2**64 - 1)
#: Kernels whose L1 extent matters get the preferred shared-memory carveout 0 (the smallest
#: carveout that holds their shared memory: as much L1 as the SM allows), as RRZE-HPC gpu-benches
#: gpu-latency sets cudaFuncAttributePreferredSharedMemoryCarveout; through CuPy's settable
#: RawKernel attribute `preferred_shared_memory_carveout` (cuFuncSetAttribute).
L1_KERNELS = frozenset({"chase_ca", "chase_cg", "timer_overhead", "loaded_chase", "retouch_probe"})
#: The SM clock is measured after this much spinning (the clock ramps up from idle).
CLOCK_WARM_NS = 200_000_000


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


def _k(name: str) -> int:
    """One integer #define of kernels/ (control and stats word indices, sizes)."""
    return kernel_constants()[name]


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
    def prop(key):
        value = props.get(key)
        return int(value) if isinstance(value, (int, np.integer)) and value > 0 else None

    # cudaDeviceProp through CuPy's getDeviceProperties: l2CacheSize is cudaDevAttrL2CacheSize
    # (an H200 reports 60 MiB), the shared-memory sizes size the loaded probe's saturator.
    return DeviceLimits(name=name, index=index, compute_capability=(int(props["major"]), int(props["minor"])),
                        sm_count=int(props["multiProcessorCount"]), l2_bytes=prop("l2CacheSize"),
                        memory_bytes=int(total), free_bytes=int(free),
                        shared_per_sm=prop("sharedMemPerMultiprocessor"),
                        shared_per_block_optin=prop("sharedMemPerBlockOptin"),
                        reserved_shared_per_block=prop("reservedSharedMemPerBlock") or 0)


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
        self._kernels: dict[tuple[str, str], object] = {}

    # -- basics -----------------------------------------------------------------------------
    def kernel(self, module: str, name: str):
        """The RawKernel `name` of kernels/<module>.cu; the L1_KERNELS with carveout 0."""
        key = (module, name)
        if key not in self._kernels:
            fn = load_module(module).get_function(name)
            if name in L1_KERNELS:
                fn.preferred_shared_memory_carveout = 0
            self._kernels[key] = fn
        return self._kernels[key]

    def refresh_limits(self) -> DeviceLimits:
        self.limits = device_limits(self.index)
        return self.limits

    def calibrate(self, spin_ns: int = 20_000_000, timer_samples: int = 4096, warm_ns: int = CLOCK_WARM_NS) -> dict:
        """Measure the SM clock (clock64 against %globaltimer, after `warm_ns` of spinning) and the
        timer overhead. Chases convert their cycles with their own clock window where it is long
        enough (tables.chase_clock); this session clock is the fallback."""
        cp = self.cp
        out = cp.zeros(3, dtype=cp.uint64)
        self.kernel("chase", "sm_clock_rate")((1,), (1,), (np.uint64(warm_ns), np.uint64(spin_ns), out))
        ns, cycles, warmed = (int(x) for x in out.get())
        self.mhz = tables.sm_clock_mhz(ns, cycles)
        lat = cp.empty(timer_samples, dtype=cp.uint32)
        self.kernel("chase", "timer_overhead")((1,), (1,), (np.uint32(timer_samples), lat, self._sink))
        self.overhead = tables.timer_overhead(lat.get())
        return {"sm_clock_mhz": self.mhz, "timer_overhead_cycles": self.overhead["median"],
                "timer_overhead": self.overhead, "clock_spin_ns": ns, "clock_spin_cycles": cycles,
                "clock_warm_ns": warmed}

    def build_ring(self, buf, links: int, stride: int, skew: int = 0, seed: int = 0) -> int:
        """Write a random ring of `links` links into `buf`; returns the start address."""
        return self.build_ring_positions(buf, links, stride, skew, seed, (0,))[0]

    def build_ring_positions(self, buf, links: int, stride: int, skew: int = 0, seed: int = 0,
                             positions=(0,)) -> list[int]:
        """Write a random ring of `links` links into `buf`; the addresses of the links at ring
        positions `positions` (mod links): a chase started there walks from that point on."""
        cp = self.cp
        order = cp.random.RandomState(seed).permutation(links).astype(cp.uint64)
        threads = 256
        blocks = int(min((links + threads - 1) // threads, 8192))
        self.kernel("chase", "chase_init")((blocks,), (threads,),
                                           (buf, order, np.uint64(links), np.uint64(stride), np.uint64(skew)))
        out = [int(buf.data.ptr) + int(tables.link_offset(int(order[int(p) % links].get()), stride, skew))
               for p in positions]
        del order
        return out

    def fill_random(self, buf, seed: int) -> None:
        """Random 64-bit words over `buf` (kernels/bandwidth.cu:fill_random)."""
        words = int(buf.nbytes) // 8
        self.kernel("bandwidth", "fill_random")((int(min(max(words // 256, 1), 65536)),), (256,),
                                                (buf, np.uint64(words), np.uint64(seed)))

    def chase(self, variant: str, start: int, warm: int, n: int, gap_ns: int = 0,
              min_window_ns: int = tables.MIN_CLOCK_WINDOW_NS) -> tuple[np.ndarray, np.ndarray]:
        """(raw per-access cycle counts, clock window [g0, g1, c0, c1]) of one chase (`ca` default
        caching, `cg` L1 bypass)."""
        cp = self.cp
        lat = cp.empty(n, dtype=cp.uint32)
        clk = cp.zeros(4, dtype=cp.uint64)
        name = {"ca": "chase_ca", "cg": "chase_cg"}[variant]
        self.kernel("chase", name)((1,), (1,), (np.uint64(start), np.uint32(warm), np.uint32(n),
                                                np.uint32(gap_ns), lat, self._sink, clk, np.uint64(min_window_ns)))
        return lat.get(), clk.get()

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
                raw, clk = self.chase(v, start, sweep.warm(fp), sweep.samples)
                clock = tables.clock_columns(clk, self.mhz)
                frames[v].append(tables.chase_frame(raw, self.overhead["median"], clock["chase_mhz"], variant=v,
                                                      stride_bytes=sweep.stride, footprint_bytes=fp, **clock))
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
        src = cp.empty(plan.buffer_bytes, dtype=cp.uint8)
        dst = cp.empty(plan.buffer_bytes, dtype=cp.uint8)
        self.fill_random(src, seed=1)
        self.fill_random(dst, seed=2)
        cp.cuda.runtime.deviceSynchronize()
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

                def launch(which: int, fn=fn, a=args[kernel], kernel=kernel, grid=grid, threads=cfg.threads):
                    counter = work[which:which + 1]
                    with stream:
                        fn((grid,), (threads,), a + (counter,) + ((self._sink,) if kernel == "read" else ()))

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
        ctl = np.zeros(_k("CTL_WORDS"), dtype=np.uint32)
        ctl[_k("CTL_PROBE_SM")] = _k("PROBE_ANY_SM")
        ctl[_k("CTL_READY")] = 0 if probe_present else 1
        stats = np.zeros(_k("ST_WORDS"), dtype=np.uint64)
        stats[_k("ST_SAT_FIRST_START")] = stats[_k("ST_SAT_FIRST_END")] = U64_MAX
        return cp.asarray(ctl), cp.asarray(stats)

    def _saturate(self, cfg: StreamConfig, bufs: tuple, nvec: int, sleep_ns: int, below: int, ctl, stats,
                  max_ns: int, shared_mem: int = 0):
        """saturator_read (bufs = (src,)) or saturator_copy (bufs = (src, dst)), with `shared_mem`
        bytes of dynamic shared memory per block (LoadedPlan.saturator_shared_bytes)."""
        name = "saturator_read" if len(bufs) == 1 else "saturator_copy"
        tail = (self._sink,) if len(bufs) == 1 else ()
        self.kernel("loaded", name)((cfg.grid(self.limits.sm_count),), (cfg.threads,),
                                    bufs + (np.uint64(nvec), np.uint32(sleep_ns), np.uint32(below), ctl, stats,
                                            np.uint64(max_ns)) + tail, shared_mem=shared_mem)

    def _saturator_shared(self, plan: LoadedPlan) -> tuple[LoadedPlan, int]:
        """The plan with the probes' compiled shared memory, and the saturator's dynamic shared
        memory per block (its kernels opted in to it through max_dynamic_shared_size_bytes)."""
        probe = max(int(self.kernel("loaded", k).attributes["shared_size_bytes"])
                    for k in ("loaded_chase", "retouch_probe"))
        name = "saturator_read" if plan.saturator_kind == "read" else "saturator_copy"
        fn = self.kernel("loaded", name)
        plan = replace(plan, probe_shared_bytes=probe)
        dyn = plan.saturator_shared_bytes(self.limits, int(fn.attributes["shared_size_bytes"]))
        if dyn:
            fn.max_dynamic_shared_size_bytes = dyn
        return plan, dyn

    def _loaded_launch(self, plan: LoadedPlan, access: str, launch, target_sm: int | None, loaded: bool, sat):
        """One probe launch (`launch(grid, ctl, stats, target)`) with the saturator beside it;
        returns (ctl, stats) as read back."""
        cp = self.cp
        ctl, stats = self._control(probe_present=True)
        cp.cuda.runtime.deviceSynchronize()  # the non-blocking streams do not wait for the copies above
        grid = 1 if target_sm is None else plan.probe_blocks_per_sm * max(self.limits.sm_count, 1)
        target = _k("PROBE_ANY_SM") if target_sm is None else target_sm
        with self._s_probe:  # the probe first: it publishes its SM before the saturator looks
            launch(grid, ctl, stats, target)
        if loaded:
            with self._s_sat:
                sat(ctl, stats)
        self._s_probe.synchronize()
        self._s_sat.synchronize()
        return ctl.get(), stats.get()

    def _window_columns(self, c, st, loaded: bool, target_sm: int | None, peak: float) -> dict:
        """The raw per-chase columns of a loaded-latency launch: placement, windows, clock, validity."""
        def ns(word):
            v = st[_k(word)]
            return np.int64(-1) if v == U64_MAX else np.int64(int(v))

        window = {"probe_start_ns": ns("ST_PROBE_START_NS"), "probe_end_ns": ns("ST_PROBE_END_NS"),
                  "saturator_start_ns": ns("ST_SAT_FIRST_START"), "saturator_end_ns": ns("ST_SAT_FIRST_END"),
                  "saturator_last_end_ns": ns("ST_SAT_LAST_END"),
                  "saturator_blocks_at_probe_start": np.int64(int(st[_k("ST_SAT_AT_PROBE_START")]))}
        probe_sm = int(c[_k("CTL_PROBE_SM")])
        claimed = bool(c[_k("CTL_CLAIM")])
        valid, reason = tables.placement(loaded, claimed, target_sm, probe_sm, window)
        clk = [st[_k("ST_PROBE_START_NS")], st[_k("ST_PROBE_END_NS")], st[_k("ST_PROBE_START_CYCLES")],
               st[_k("ST_PROBE_END_CYCLES")]]
        clock = tables.clock_columns(clk, self.mhz)
        gbs = tables.saturator_gbs(st) if loaded else 0.0
        return {"achieved_gbs": gbs, "bandwidth_fraction": gbs / peak if peak else 0.0,
                "probe_sm": np.int64(probe_sm if claimed else -1),
                "saturator_blocks": np.int64(int(c[_k("CTL_STARTED")])),
                "blocks_left_probe_sm": np.int64(int(c[_k("CTL_LEFT")])), **window,
                "probe_start_cycles": np.int64(int(clk[2])), "probe_end_cycles": np.int64(int(clk[3])),
                "chase_mhz": clock["chase_mhz"], "clock_source": clock["clock_source"],
                "valid": valid, "invalid_reason": reason}

    def loaded(self, plan: LoadedPlan, progress: Progress = _noop) -> dict:
        """Loaded latency -> {'loaded': per-sample rows, 'loaded_calibration': saturator alone}.

        Per level: the HBM chase (a new ring position each time) and the re-touch probe (hot set
        and re-touches after controlled intervals), each on the SM of the first idle chase, each
        kept only when its window lies inside the saturator's (else rerun, and the invalid
        attempt is kept with its reason); docs/replacement-delay.md.
        """
        import pandas as pd

        cp = self.cp
        plan = plan.for_device(self.refresh_limits())
        plan.validate(self.limits)
        self._need_calibration()
        plan, sat_shared = self._saturator_shared(plan)
        cfg = plan.saturator
        sat = tuple(cp.empty(plan.saturator_bytes, dtype=cp.uint8)
                    for _ in range(2 if plan.saturator_kind == "copy" else 1))
        for i, buf in enumerate(sat):
            self.fill_random(buf, seed=plan.seed + 11 + i)
        nvec = cfg.vectors(plan.saturator_bytes, self.limits.sm_count)
        below = self.sm_threshold(cfg.active_sms)  # learnt here, not inside the streams below
        # 1. the saturator alone at each throttle: bandwidth against sleep per iteration
        cal = []
        for sleep in plan.calibration_sleeps_ns:
            ctl, stats = self._control(probe_present=False)
            cp.cuda.runtime.deviceSynchronize()
            self._saturate(cfg, sat, nvec, sleep, below, ctl, stats, plan.calibration_ns, sat_shared)
            cp.cuda.runtime.deviceSynchronize()
            cal.append({"saturator": plan.saturator_kind, "throttle_ns": int(sleep),
                        "achieved_gbs": tables.saturator_gbs(stats.get()),
                        "blocks": cfg.grid(self.limits.sm_count), "threads": cfg.threads,
                        "shared_bytes": int(sat_shared)})
        progress(1)
        cal_frame = pd.DataFrame(cal)
        peak = float(cal_frame["achieved_gbs"].max())
        sleeps = tables.choose_throttles(cal_frame["throttle_ns"], cal_frame["achieved_gbs"],
                                           [t * peak for t in plan.targets])
        # 2. per level: the HBM chase (miss reference) and the re-touch probe (hot set, re-touches)
        levels = [(0, 0.0, 0)] + [(i + 1, t, s) for i, (t, s) in enumerate(zip(plan.targets, sleeps))]
        attempts = 1 + plan.placement_retries
        hbm_lines = plan.hbm_footprint // LINE_BYTES
        hbm_warm = min(plan.samples, hbm_lines)
        hbm_buf = cp.empty(plan.hbm_footprint, dtype=cp.uint8)
        # a fresh stretch of the HBM ring for every launch: lines of one level are not in the L2 at the next
        hbm_starts = self.build_ring_positions(hbm_buf, hbm_lines, LINE_BYTES, seed=plan.seed,
                                               positions=[k * (hbm_warm + plan.samples)
                                                          for k in range(len(levels) * attempts)])
        ret_buf = cp.empty(plan.retouch_bytes, dtype=cp.uint8)
        ret_start = self.build_ring(ret_buf, plan.retouch_bytes // LINE_BYTES, LINE_BYTES, seed=plan.seed + 1)
        hot_buf = cp.empty(plan.hot_bytes, dtype=cp.uint8)
        hot_lines = plan.hot_bytes // LINE_BYTES
        hot_start = self.build_ring(hot_buf, hot_lines, LINE_BYTES, seed=plan.seed + 2)
        intervals = plan.round_intervals
        rounds, per_round = len(intervals), plan.retouch_lines
        interval_dev = cp.asarray(np.asarray(intervals, dtype=np.uint32))
        self._s_probe = cp.cuda.Stream(non_blocking=True)
        self._s_sat = cp.cuda.Stream(non_blocking=True)
        hbm_fn, ret_fn = self.kernel("loaded", "loaded_chase"), self.kernel("loaded", "retouch_probe")
        overhead = self.overhead["median"]
        frames = []
        target_sm: int | None = None
        hbm_launches = 0
        for level, target, sleep in levels:
            loaded = level > 0
            common = {"level": np.int64(level), "target_fraction": float(target), "throttle_ns": np.int64(sleep)}

            def saturator(ctl, stats, sleep=sleep, bufs=sat):
                self._saturate(cfg, bufs, nvec, sleep, below, ctl, stats, plan.max_ns, sat_shared)

            for access in ("hbm", "retouch"):
                for attempt in range(attempts):
                    wait = np.uint32(loaded)
                    tail = (np.uint64(plan.settle_ns), np.uint64(_k("READY_TIMEOUT_NS")))
                    if access == "hbm":
                        start = hbm_starts[hbm_launches]
                        hbm_launches += 1
                        lat = cp.empty(plan.samples, dtype=cp.uint32)

                        def launch(grid, ctl, stats, tsm, start=start, lat=lat, wait=wait, tail=tail):
                            hbm_fn((grid,), (1,), (np.uint64(start), np.uint32(hbm_warm), np.uint32(plan.samples),
                                                   lat, self._sink, ctl, stats, np.uint32(tsm), wait) + tail)
                    else:
                        bufs = [cp.empty(rounds * per_round, dtype=cp.uint32) for _ in range(4)]
                        hot_lat = cp.empty(plan.hot_samples, dtype=cp.uint32)
                        hot_n = cp.zeros(1, dtype=cp.uint32)

                        def launch(grid, ctl, stats, tsm, bufs=bufs, hot_lat=hot_lat, hot_n=hot_n, wait=wait,
                                   tail=tail):
                            ret_fn((grid,), (1,), (np.uint64(ret_start), np.uint32(per_round), np.uint32(rounds),
                                                   interval_dev, *bufs, np.uint64(hot_start),
                                                   np.uint32(2 * hot_lines), np.uint32(plan.hot_samples), hot_lat,
                                                   hot_n, self._sink, ctl, stats, np.uint32(tsm), wait) + tail)
                    c, st = self._loaded_launch(plan, access, launch, target_sm, loaded, saturator)
                    cols = {**common, **self._window_columns(c, st, loaded, target_sm, peak),
                            "attempt": np.int64(attempt)}
                    mhz = cols["chase_mhz"]
                    if access == "hbm":
                        frames.append(tables.chase_frame(lat.get(), overhead, mhz, access="hbm",
                                                         footprint_bytes=np.int64(plan.hbm_footprint), **cols))
                    else:
                        prime_lat, prime_start, re_lat, re_start = (b.get() for b in bufs)
                        n_hot = int(hot_n.get()[0])
                        frames.append(tables.chase_frame(hot_lat.get()[:n_hot], overhead, mhz, access="hot",
                                                         footprint_bytes=np.int64(plan.hot_bytes), **cols))
                        age = tables.line_ages(prime_start, re_start)
                        per = {"round": np.repeat(np.arange(rounds, dtype=np.int64), per_round),
                               "interval_ns": np.repeat(np.asarray(intervals, dtype=np.int64), per_round),
                               "age_cycles": age, "age_ns": tables.cycles_to_ns(age, mhz),
                               "prime_latency_cycles": tables.net_cycles(prime_lat, overhead)}
                        frames.append(tables.chase_frame(re_lat, overhead, mhz, per_sample=per, access="retouch",
                                                         footprint_bytes=np.int64(plan.retouch_bytes), **cols))
                    if target_sm is None and cols["probe_sm"] >= 0:
                        target_sm = int(cols["probe_sm"])  # every later chase runs on this SM
                    if cols["valid"]:
                        break
            progress(1)
        sat = hbm_buf = ret_buf = hot_buf = None  # free the buffers (the closures above name `sat`)
        cp.get_default_memory_pool().free_all_blocks()
        return {"loaded": tables.loaded_table(frames), "loaded_calibration": cal_frame, "peak_gbs": peak}


@contextmanager
def timed_phase(phases: list, name: str, t0_ns: int):
    """Append {'name', 'start_s', 'end_s'} around a block, in seconds since `t0_ns`, a
    `time.monotonic_ns()` reading (the samplers' clock, so phases line up with their `t_ns`)."""
    start = (time.monotonic_ns() - t0_ns) / 1e9
    try:
        yield
    finally:
        phases.append({"name": name, "start_s": start, "end_s": (time.monotonic_ns() - t0_ns) / 1e9})
