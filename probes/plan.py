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

__all__ = [
    "LINE_BYTES",
    "MAX_BLOCKS_PER_SM",
    "MAX_THREADS_PER_SM",
    "RESERVE_BYTES",
    "RETOUCH_INTERVALS_NS",
    "SATURATOR_STATIC_SMEM",
    "SMEM_GRANULE",
    "TLB_SKEW",
    "VEC_BYTES",
    "BandwidthPlan",
    "ChaseSweep",
    "DeviceLimits",
    "LatencyPlan",
    "LoadedPlan",
    "StreamConfig",
    "TlbPlan",
    "check_memory",
    "check_sms",
    "claim_steps",
    "geometric_sizes",
    "probe_static_smem",
    "require_hopper",
    "require_probe_capable",
    "ring_bytes",
    "stream_unroll",
]

LINE_BYTES = 128
VEC_BYTES = 16            # one uint4 per thread per access (kernels/common.cuh)
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32    # compute capability 7.0 .. 9.0
#: TLB sweep skew: 17 lines, odd, so link k's line inside its page is 17 k mod (stride/128).
TLB_SKEW = 17 * LINE_BYTES
#: Device memory left alone for the CUDA context, CuPy's pool and other tenants.
RESERVE_BYTES = 512 * MiB
#: Shared-memory allocation granularity per block (the CUDA occupancy calculator's 128 B on sm_80+).
SMEM_GRANULE = 128
#: Static shared memory of the saturator kernels (two words; the compiled size is used on the GPU).
SATURATOR_STATIC_SMEM = 16
#: Default re-touch intervals (ns), each run `interval_reps` times per level (docs/replacement-delay.md).
RETOUCH_INTERVALS_NS = (0, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)


def stream_unroll() -> int:
    """Vectors in flight per thread (kernels/common.cuh), read from the kernel text on first use."""
    return kernel_constants()["STREAM_UNROLL"]


def probe_static_smem() -> int:
    """Static shared memory of the largest probe kernel (kernels/loaded.cu:retouch_probe: two stamp
    arrays of 2 x CHASE_CHUNK words, and a sink word each), from the kernel text. On the GPU the
    compiled size (the kernels' `shared_size_bytes` attribute) replaces this estimate."""
    return 2 * (2 * kernel_constants()["CHASE_CHUNK"] * 4 + 4)


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
    #: cudaDeviceProp sharedMemPerMultiprocessor, sharedMemPerBlockOptin, reservedSharedMemPerBlock
    #: (None when unknown: the saturator's shared memory is then not sized)
    shared_per_sm: int | None = None
    shared_per_block_optin: int | None = None
    reserved_shared_per_block: int = 0

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
    """Loaded latency: one-thread probes on one SM against a saturator on the others.

    Level 0 runs the probes alone; levels 1.. run the saturator with the throttle chosen (by a
    short calibration of the saturator alone) to inject `targets` x its unthrottled bandwidth.
    Per level: the HBM chase (miss reference) and the re-touch probe (hot-set hits, and lines
    re-touched after each of `intervals_ns`); docs/replacement-delay.md. Every level's probes
    run on the SM the level-0 probe ran on.
    """

    hbm_footprint: int            # chase (a): far beyond the L2, every access misses to HBM
    retouch_bytes: int            # re-touch ring: each round takes fresh lines from it
    saturator_bytes: int          # streamed by the saturator, several times the L2
    targets: list[float] = field(default_factory=lambda: [i / 8 for i in range(1, 9)])
    samples: int = 4096
    # 3 x 512 threads per SM; the saturator's shared memory (saturator_shared_bytes) keeps a
    # fourth block off every SM and leaves room for the probe's block (kernels/loaded.cu)
    saturator: StreamConfig = field(default_factory=lambda: StreamConfig(active_sms=0, blocks_per_sm=3))
    calibration_sleeps_ns: list[int] = field(
        default_factory=lambda: [0, 100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200])
    calibration_ns: int = 20_000_000
    settle_ns: int = 200_000
    max_ns: int = 2_000_000_000   # saturator stops by itself after this, whatever happens
    saturator_kind: str = "read"  # "read" (saturator_read) or "copy" (saturator_copy: reads + writes)
    seed: int = 0
    hot_bytes: int = 16 * LINE_BYTES      # the hot set: small enough to stay L2-resident under load
    hot_samples: int = 4096
    retouch_lines: int = 8                # lines primed and re-touched per round (issue 20.3: short ages)
    intervals_ns: tuple[int, ...] = RETOUCH_INTERVALS_NS
    interval_reps: int = 24
    probe_shared_bytes: int = 0           # static shared memory of the probe kernels (0: from the kernel text)
    probe_blocks_per_sm: int = 2          # probe grid = this x SMs one-thread blocks; one claims the target SM
    placement_retries: int = 1            # a chase whose window is not inside the saturator's is rerun

    @property
    def levels(self) -> int:
        return 1 + len(self.targets)

    @property
    def round_intervals(self) -> list[int]:
        """The interval of each re-touch round: every interval once, `interval_reps` times over."""
        return [int(t) for _ in range(self.interval_reps) for t in self.intervals_ns]

    @property
    def retouch_samples(self) -> int:
        return len(self.round_intervals) * self.retouch_lines

    @property
    def need_bytes(self) -> int:
        lines = self.hbm_footprint // LINE_BYTES
        copies = 2 if self.saturator_kind == "copy" else 1
        return (self.hbm_footprint + self.retouch_bytes + self.hot_bytes + copies * self.saturator_bytes
                + ring_bytes(lines) + 8 * (self.samples + self.hot_samples) + 16 * self.retouch_samples)

    def for_device(self, device: DeviceLimits) -> LoadedPlan:
        """The plan with the saturator spread over every SM (the probe's SM is left by placement)."""
        if self.saturator.active_sms:
            return self
        return replace(self, saturator=replace(self.saturator, active_sms=max(device.sm_count, 1)))

    def saturator_shared_bytes(self, device: DeviceLimits, saturator_static: int = SATURATOR_STATIC_SMEM) -> int:
        """Dynamic shared memory per saturator block: at most `blocks_per_sm` saturator blocks fit
        on an SM, and beside them the probe's block (its static shared memory and the per-block
        reservation). 0 when the device's shared memory per SM is unknown.

        With S the shared memory per SM, r the reservation per block and p the probe's: each
        saturator block takes T = (S - p - r) // blocks_per_sm (rounded down to the allocation
        granule), so blocks_per_sm x T + p + r <= S, while (blocks_per_sm + 1) x T > S.
        """
        S = device.shared_per_sm
        if not S:
            return 0
        r = device.reserved_shared_per_block
        p = self.probe_shared_bytes or probe_static_smem()
        bps = self.saturator.blocks_per_sm
        per_block = (S - p - r) // bps // SMEM_GRANULE * SMEM_GRANULE
        dyn = per_block - r - saturator_static
        if dyn < 0 or (bps + 1) * per_block <= S:
            raise PlanError(f"the saturator cannot keep to {bps} blocks per SM beside the probe on {device.describe()} "
                            f"({S} B of shared memory per SM, probe {p} B): use fewer blocks per SM")
        optin = device.shared_per_block_optin
        if optin and dyn + saturator_static > optin:
            raise PlanError(f"the saturator would need {dyn + saturator_static} B of shared memory per block, beyond "
                            f"the {optin} B a block may have on {device.describe()}: use more blocks per SM")
        return int(dyn)

    def validate(self, device: DeviceLimits) -> None:
        require_probe_capable(device)
        if device.sm_count and device.sm_count < 2:
            raise PlanError(f"loaded latency needs at least 2 SMs (probe + saturator); {device.describe()} has "
                            f"{device.sm_count}")
        self.saturator.validate(device, "the saturator")
        if self.saturator.blocks_per_sm * self.saturator.threads + 32 > MAX_THREADS_PER_SM:
            raise PlanError(f"the saturator's {self.saturator.blocks_per_sm} blocks of {self.saturator.threads} "
                            f"threads leave no room for the probe's warp on an SM ({MAX_THREADS_PER_SM} threads "
                            "at most)")
        if self.saturator_kind not in ("read", "copy"):
            raise PlanError(f"saturator {self.saturator_kind!r}: use read or copy")
        if len(self.targets) < 1 or any(not 0 < t <= 1 for t in self.targets):
            raise PlanError("load targets must be fractions in (0, 1] of the saturator's peak")
        if self.samples < 1:
            raise PlanError("loaded latency: need at least one sample per level")
        if not 1 <= self.retouch_lines <= 1024 or self.interval_reps < 1 or not self.intervals_ns:
            raise PlanError("the re-touch probe needs 1..1024 lines per round and at least one interval and rep")
        if any(t < 0 or t > 1_000_000_000 for t in self.intervals_ns):
            raise PlanError("re-touch intervals must be within 0..1 s")
        if self.retouch_samples > self.retouch_bytes // LINE_BYTES:
            raise PlanError(f"the re-touch ring {format_size(self.retouch_bytes)} holds fewer than the "
                            f"{self.retouch_samples} fresh lines its rounds take: raise --retouch")
        if self.hot_bytes < 2 * LINE_BYTES:
            raise PlanError("the hot set needs at least 2 lines")
        if device.l2_bytes:
            if self.retouch_bytes + self.hot_bytes > device.l2_bytes // 2:
                raise PlanError(f"the re-touch set {format_size(self.retouch_bytes)} must fit well inside the L2 "
                                f"({format_size(device.l2_bytes)}): at most half of it")
            if self.hbm_footprint < 2 * device.l2_bytes:
                raise PlanError(f"the HBM chase footprint {format_size(self.hbm_footprint)} must be at least twice "
                                f"the L2 ({format_size(device.l2_bytes)})")
        if self.saturator.vectors(self.saturator_bytes, device.sm_count) == 0:
            raise PlanError(f"the saturator buffer {format_size(self.saturator_bytes)} is smaller than one pass")
        self.saturator_shared_bytes(device)
        check_memory(device, self.need_bytes, "the loaded-latency probe", "lower the HBM footprint or the "
                     "saturator buffer")
