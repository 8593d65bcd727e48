"""Launch planning for the probes: pure Python, checked before anything touches the GPU.

A plan says what each probe will sweep (footprints, strides, grid sizes, load levels), how
much device memory it needs, and `validate(device)` refuses, with one clear line, what cannot
run: a footprint beyond the free memory, more SMs than the device has, a GPU too old for the
kernels, or a non-Hopper GPU where Hopper-only counters are asked for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from sitsprof.common.sizes import MiB, format_size

from .errors import PlanError
from .kernels import kernel_constants

LINE_BYTES = 128
VEC_BYTES = 16            # one uint4 per thread per access (kernels/common.cuh)
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32    # compute capability 7.0 .. 9.0
#: TLB sweep skew: 17 lines, odd, so link k's line inside its page is 17 k mod (stride/128).
TLB_SKEW = 17 * LINE_BYTES
#: Device memory left alone for the CUDA context, CuPy's pool and other tenants.
RESERVE_BYTES = 512 * MiB


def stream_unroll() -> int:
    """Vectors in flight per thread (kernels/common.cuh), read from the kernel text on first use."""
    return kernel_constants()["STREAM_UNROLL"]


def claim_steps() -> int:
    """Steps of one claimed chunk (kernels/bandwidth.cu), read from the kernel text on first use."""
    return kernel_constants()["CLAIM_STEPS"]


def geometric_sizes(lo: int, hi: int, per_octave: int = 4, align: int = LINE_BYTES) -> list[int]:
    """Sizes from lo to hi (both included) in geometric steps, `per_octave` per doubling,
    each rounded down to a multiple of `align`, without repeats."""
    if lo <= 0 or hi < lo:
        raise PlanError(f"bad size range {format_size(lo)} .. {format_size(hi)}")
    if per_octave < 1:
        raise PlanError("need at least one step per octave")
    n = int(math.floor(math.log2(hi / lo) * per_octave + 1e-9))
    sizes = [lo * 2 ** (k / per_octave) for k in range(n + 1)]
    if sizes[-1] < hi:
        sizes.append(hi)
    out = sorted({max(align, int(s) // align * align) for s in sizes})
    return out


@dataclass
class DeviceLimits:
    """What planning needs to know about the GPU."""

    name: str = "unknown GPU"
    index: int = 0
    compute_capability: tuple[int, int] = (0, 0)
    sm_count: int = 0
    l2_bytes: int | None = None
    memory_bytes: int = 0
    free_bytes: int = 0

    @property
    def is_hopper(self) -> bool:
        return self.compute_capability == (9, 0)

    def describe(self) -> str:
        cc = ".".join(map(str, self.compute_capability))
        return f"GPU {self.index} ({self.name}, compute capability {cc})"


def require_hopper(device: DeviceLimits, what: str) -> None:
    """Refuse Hopper-only features (GPM, the Hopper counter set) on another GPU."""
    if not device.is_hopper:
        raise PlanError(f"{what} needs a Hopper GPU (compute capability 9.0, H100/H200/GH200); "
                        f"{device.describe()} is not one; leave {what} out on this GPU")


def require_probe_capable(device: DeviceLimits) -> None:
    """The kernels use __nanosleep and %globaltimer: compute capability 7.0 or newer."""
    if device.compute_capability < (7, 0):
        raise PlanError(f"the probes need compute capability 7.0 or newer; {device.describe()} is older")


def check_memory(device: DeviceLimits, need: int, what: str, fix: str) -> None:
    """Refuse a plan whose buffers do not fit in the free device memory (less a reserve)."""
    usable = device.free_bytes - RESERVE_BYTES
    if need > usable:
        raise PlanError(f"{what} needs {format_size(need)} of device memory but {device.describe()} has "
                        f"{format_size(max(device.free_bytes, 0))} free ({format_size(RESERVE_BYTES)} kept in "
                        f"reserve); {fix}")


def check_sms(device: DeviceLimits, sms: int, what: str) -> None:
    if sms < 1:
        raise PlanError(f"{what}: the SM count must be at least 1 (got {sms})")
    if device.sm_count and sms > device.sm_count:
        raise PlanError(f"{what}: {sms} SMs asked for, but {device.describe()} has {device.sm_count} SMs")


def ring_bytes(lines: int) -> int:
    """Device memory taken while a ring is built: the uint64 order array, its int64 original
    and the permutation's sort temporaries (about four 8-byte words per link)."""
    return 32 * (lines + 1)


@dataclass
class ChaseSweep:
    """One pointer-chase sweep: a ring of `footprint // stride` links per footprint."""

    footprints: list[int]
    stride: int = LINE_BYTES
    skew: int = 0            # per-link offset inside its stride (TLB: spreads L2 sets)
    samples: int = 4096
    warm_full_bytes: int = 256 * MiB  # warm a whole pass below this footprint, else `samples` links
    seed: int = 0

    def links(self, footprint: int) -> int:
        return footprint // self.stride

    def warm(self, footprint: int) -> int:
        n = self.links(footprint)
        return n if footprint <= self.warm_full_bytes else min(n, self.samples)

    @property
    def buffer_bytes(self) -> int:
        return max(self.footprints)

    @property
    def need_bytes(self) -> int:
        return self.buffer_bytes + ring_bytes(self.links(self.buffer_bytes)) + 8 * self.samples

    def validate(self, device: DeviceLimits, what: str = "the chase") -> None:
        if not self.footprints:
            raise PlanError(f"{what}: no footprints to sweep")
        if self.stride % 8 or self.stride < 8:
            raise PlanError(f"{what}: stride {self.stride} must be a multiple of 8 bytes")
        for fp in self.footprints:
            if fp < 2 * self.stride:
                raise PlanError(f"{what}: footprint {format_size(fp)} holds fewer than 2 links of "
                                f"{format_size(self.stride)}")
            if self.links(fp) >= 2**32:
                raise PlanError(f"{what}: footprint {format_size(fp)} has too many links for the chase")
        if self.skew % LINE_BYTES or (self.skew and self.stride <= LINE_BYTES):
            raise PlanError(f"{what}: skew {self.skew} must be a multiple of {LINE_BYTES} B, with a stride above it")
        if self.samples < 1:
            raise PlanError(f"{what}: need at least one sample per footprint")
        check_memory(device, self.need_bytes, f"{what} up to {format_size(self.buffer_bytes)}",
                     "lower the largest footprint")


@dataclass
class LatencyPlan:
    """Latency ladder: default-cached chase (all tiers, L1 included) and L1-bypassing chase."""

    sweep: ChaseSweep
    variants: tuple[str, ...] = ("ca", "cg")
    timer_samples: int = 4096
    clock_spin_ns: int = 20_000_000

    def validate(self, device: DeviceLimits) -> None:
        require_probe_capable(device)
        bad = set(self.variants) - {"ca", "cg"}
        if bad:
            raise PlanError(f"unknown chase variant(s) {sorted(bad)}: use ca (default caching) or cg (L1 bypass)")
        self.sweep.validate(device, "the latency ladder")


@dataclass
class TlbPlan:
    """TLB sweep: the L1-bypassing chase with page-sized strides over growing footprints."""

    sweeps: list[ChaseSweep]

    def validate(self, device: DeviceLimits) -> None:
        require_probe_capable(device)
        for s in self.sweeps:
            s.validate(device, f"the TLB sweep at stride {format_size(s.stride)}")

    @property
    def need_bytes(self) -> int:
        return max(s.need_bytes for s in self.sweeps)


@dataclass
class StreamConfig:
    """One intensity setting of a streaming kernel."""

    active_sms: int
    blocks_per_sm: int = 4
    threads: int = 512
    throttle_ns: int = 0

    @property
    def blocks(self) -> int:
        """Working blocks (on the active SMs)."""
        return self.active_sms * self.blocks_per_sm

    def grid(self, sm_count: int) -> int:
        """Blocks launched: blocks_per_sm on every SM of the device; the bandwidth kernels'
        blocks on SMs beyond the active ones leave at once (kernels/bandwidth.cu)."""
        return max(sm_count, 1) * self.blocks_per_sm

    def vectors(self, buffer_bytes: int, sm_count: int) -> int:
        """Grid-stride kernels (the saturator): a multiple of the launched threads x unroll."""
        unit = self.grid(sm_count) * self.threads * stream_unroll()
        return (buffer_bytes // VEC_BYTES) // unit * unit

    def claim_vectors(self, buffer_bytes: int) -> int:
        """Claiming kernels (bandwidth.cu): a multiple of one block's chunk per pass."""
        unit = self.threads * stream_unroll() * claim_steps()
        return (buffer_bytes // VEC_BYTES) // unit * unit

    def validate(self, device: DeviceLimits, what: str) -> None:
        check_sms(device, self.active_sms, what)
        if self.threads < 32 or self.threads > 1024 or self.threads % 32:
            raise PlanError(f"{what}: threads per block must be a multiple of 32 in 32..1024 (got {self.threads})")
        if self.blocks_per_sm > MAX_BLOCKS_PER_SM:
            raise PlanError(f"{what}: {self.blocks_per_sm} blocks per SM is beyond the {MAX_BLOCKS_PER_SM} an SM holds")
        if self.blocks_per_sm < 1 or self.blocks_per_sm * self.threads > MAX_THREADS_PER_SM:
            raise PlanError(f"{what}: {self.blocks_per_sm} blocks of {self.threads} threads do not fit on one SM "
                            f"({MAX_THREADS_PER_SM} threads at most)")
        if self.throttle_ns < 0 or self.throttle_ns > 1_000_000:
            raise PlanError(f"{what}: throttle {self.throttle_ns} ns is outside 0..1,000,000 ns")


@dataclass
class BandwidthPlan:
    """Streaming read/write/copy over one buffer at several intensities, and cudaMemcpy D2D."""

    buffer_bytes: int
    configs: list[StreamConfig]
    kernels: tuple[str, ...] = ("read", "write", "copy")
    reps: int = 3          # timed launches per setting
    passes: int = 2        # passes over the buffer per launch

    @property
    def need_bytes(self) -> int:
        return 2 * self.buffer_bytes  # copy needs a source and a destination

    def validate(self, device: DeviceLimits) -> None:
        require_probe_capable(device)
        bad = set(self.kernels) - {"read", "write", "copy"}
        if bad:
            raise PlanError(f"unknown bandwidth kernel(s) {sorted(bad)}: use read, write, copy")
        if not self.configs:
            raise PlanError("the bandwidth probe needs at least one intensity setting")
        for c in self.configs:
            c.validate(device, "the bandwidth probe")
            chunk = stream_unroll() * claim_steps()
            if c.claim_vectors(self.buffer_bytes) < c.threads * chunk * c.blocks:
                raise PlanError(f"the bandwidth buffer {format_size(self.buffer_bytes)} is smaller than one chunk "
                                f"of {c.threads} threads x {chunk} x {VEC_BYTES} B per "
                                f"working block ({c.blocks})")
        check_memory(device, self.need_bytes, f"the bandwidth probe ({format_size(self.buffer_bytes)} x 2)",
                     "lower --buffer")


@dataclass
class LoadedPlan:
    """Loaded latency: a one-thread chase on one SM against a saturator on the others.

    Level 0 runs the probe alone; levels 1.. run the saturator with the throttle chosen (by a
    short calibration of the saturator alone) to inject `targets` x its unthrottled bandwidth.
    """

    hbm_footprint: int            # chase (a): far beyond the L2, every access misses to HBM
    retouch_bytes: int            # chase (b): L2-resident set the saturator's traffic evicts
    saturator_bytes: int          # streamed by the saturator, several times the L2
    targets: list[float] = field(default_factory=lambda: [i / 8 for i in range(1, 9)])
    samples: int = 4096
    # 3 x 512 threads per SM: every SM keeps room for the probe's block, so the probe is placed
    # whichever kernel the GPU dispatches first (kernels/loaded.cu)
    saturator: StreamConfig = field(default_factory=lambda: StreamConfig(active_sms=0, blocks_per_sm=3))
    calibration_sleeps_ns: list[int] = field(
        default_factory=lambda: [0, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200])
    calibration_ns: int = 20_000_000
    settle_ns: int = 200_000
    max_ns: int = 2_000_000_000   # saturator stops by itself after this, whatever happens
    retouch_gap_ns: int = 0
    saturator_kind: str = "read"  # "read" (saturator_read) or "copy" (saturator_copy: reads + writes)
    seed: int = 0

    @property
    def levels(self) -> int:
        return 1 + len(self.targets)

    @property
    def need_bytes(self) -> int:
        lines = self.hbm_footprint // LINE_BYTES
        copies = 2 if self.saturator_kind == "copy" else 1
        return (self.hbm_footprint + self.retouch_bytes + copies * self.saturator_bytes + ring_bytes(lines)
                + 8 * self.samples)

    def for_device(self, device: DeviceLimits) -> "LoadedPlan":
        """The plan with the saturator spread over every SM (the probe's SM is left by placement)."""
        if self.saturator.active_sms:
            return self
        return replace(self, saturator=replace(self.saturator, active_sms=max(device.sm_count, 1)))

    def validate(self, device: DeviceLimits) -> None:
        require_probe_capable(device)
        if device.sm_count and device.sm_count < 2:
            raise PlanError(f"loaded latency needs at least 2 SMs (probe + saturator); {device.describe()} has "
                            f"{device.sm_count}")
        self.saturator.validate(device, "the saturator")
        if self.saturator_kind not in ("read", "copy"):
            raise PlanError(f"saturator {self.saturator_kind!r}: use read or copy")
        if len(self.targets) < 1 or any(not 0 < t <= 1 for t in self.targets):
            raise PlanError("load targets must be fractions in (0, 1] of the saturator's peak")
        if self.samples < 1:
            raise PlanError("loaded latency: need at least one sample per level")
        if device.l2_bytes:
            if self.retouch_bytes > device.l2_bytes // 2:
                raise PlanError(f"the re-touch set {format_size(self.retouch_bytes)} must fit well inside the L2 "
                                f"({format_size(device.l2_bytes)}): at most half of it")
            if self.hbm_footprint < 2 * device.l2_bytes:
                raise PlanError(f"the HBM chase footprint {format_size(self.hbm_footprint)} must be at least twice "
                                f"the L2 ({format_size(device.l2_bytes)})")
        if self.saturator.vectors(self.saturator_bytes, device.sm_count) == 0:
            raise PlanError(f"the saturator buffer {format_size(self.saturator_bytes)} is smaller than one pass")
        check_memory(device, self.need_bytes, "the loaded-latency probe", "lower the HBM footprint or the "
                     "saturator buffer")
