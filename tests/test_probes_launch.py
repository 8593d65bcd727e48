"""The CuPy launchers (probes/gpu.py) against a stand-in CuPy that emulates the kernels on the CPU.

No GPU is involved and no figure here means anything about hardware. What this checks: every
launch passes exactly the arguments its C signature in kernels/*.cu declares (pointer or
np.uint32 / np.uint64, parsed from the source CuPy would compile), rings built by chase_init
are walked through valid addresses only, the control block of the loaded-latency probe is
read back the way kernels/loaded.cu writes it, and `sitsprof run` goes end to end (fake NVML
for the device facts, clocks and samplers) into a complete run directory.
"""
from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest

from sitsprof.probes import gpu
from sitsprof.probes import kernels as K
from sitsprof.probes import tables as A

KiB, MiB = 1024, 1024**2
SMS, L2 = 4, 1 * MiB
_PARAM = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\)\s*)?(\w+)\(([^)]*)\)', re.S)


def signatures() -> dict[str, list[str]]:
    """name -> parameter kinds ('ptr', 'u32', 'u64') from the kernel sources."""
    out = {}
    for name in K.KERNEL_FILES:
        for fn, params in _PARAM.findall(K.kernel_source(name)):
            kinds = []
            for p in params.split(","):
                p = " ".join(p.split())
                kinds.append("ptr" if "*" in p else p.split()[0])
            out[fn] = kinds
    return out


class Memory:
    """Device address space: allocations at distinct, 2 MiB-aligned fake addresses."""

    def __init__(self):
        self.next = 0x7F00_0000_0000
        self.blocks: list[FakeArray] = []

    def place(self, arr) -> int:
        base = self.next
        self.next += (arr.a.nbytes // (2 * MiB) + 2) * 2 * MiB
        self.blocks.append(arr)
        return base

    def resolve(self, addr: int):
        for arr in self.blocks:
            if arr.ptr <= addr < arr.ptr + arr.a.nbytes:
                return arr, addr - arr.ptr
        raise AssertionError(f"kernel dereferenced {addr:#x}, outside every allocation")


class FakeArray:
    def __init__(self, mem: Memory, a: np.ndarray):
        self.a = a
        self.ptr = mem.place(self)
        self.data = types.SimpleNamespace(ptr=self.ptr)
        self.dtype = a.dtype
        self.nbytes = a.nbytes

    def get(self):
        return self.a.copy()

    def __getitem__(self, idx):
        if isinstance(idx, slice):  # a view: same memory, pointer moved to its first element
            view = object.__new__(FakeArray)
            view.a = self.a[idx]
            view.ptr = self.ptr + (idx.start or 0) * self.a.itemsize
            view.data = types.SimpleNamespace(ptr=view.ptr)
            view.dtype = self.a.dtype
            view.nbytes = view.a.nbytes
            return view
        return types.SimpleNamespace(get=lambda: self.a[idx])

    def fill(self, value):
        self.a[:] = value

    def astype(self, dtype):
        return FakeArray(MEM, self.a.astype(dtype))

    def u64(self) -> np.ndarray:
        return self.a.view(np.uint64)


MEM = Memory()
#: Static shared memory per kernel as `ptxas -v` reports it for sm_90 (kernels/*.cu: chase_timed's
#: 2 x CHASE_CHUNK stamps + a sink word; retouch_probe has two instances; the saturators' two words).
STATIC_SMEM = {"chase_cg": 8196, "chase_ca": 8196, "timer_overhead": 8196, "loaded_chase": 8196,
               "retouch_probe": 16392, "saturator_read": 16, "saturator_copy": 16,
               "bw_read": 8, "bw_write": 8, "bw_copy": 8}
C = K.kernel_constants()
ANY_SM = C["PROBE_ANY_SM"]


class Emulator:
    """Python versions of the kernels, with the model latencies of a Hopper-like ladder.

    Time: `now_ns` is the global timer; the SM clock runs at `mhz`, ramping up from `idle_mhz`
    over `ramp_ns` of busy spinning (sm_clock_rate), the way a GPU under --clocks none leaves idle.
    """

    def __init__(self):
        self.sigs = signatures()
        self.calls: list[str] = []
        self.launches: list[dict] = []   # name, carveout, shared_mem of every launch
        self.now_ns = 10**9
        self.mhz = 1980.0
        self.idle_mhz = 1980.0
        self.ramp_ns = 0
        self.probe_sm = 3                # where the next unpinned probe lands
        self.late_saturator: set[int] = set()   # loaded launches (counted) whose saturator starts after the probe
        self.hbm_starts: list[int] = []
        self.hbm_lines: list[set] = []
        self.retouch_tau_ns = 100_000
        self._loaded_launch = 0
        self._probe = None

    def cycles(self, ns) -> int:
        return int(ns * self.mhz / 1e3)

    def launch(self, name, grid, block, args, shared_mem=0, carveout=-1):
        kinds = self.sigs[name]
        assert len(args) == len(kinds), (name, len(args), kinds)
        for k, (kind, arg) in enumerate(zip(kinds, args)):
            want = {"ptr": FakeArray, "u32": np.uint32, "u64": np.uint64}[kind]
            assert type(arg) is want, f"{name} argument {k}: {type(arg).__name__} where the C signature has {kind}"
        self.calls.append(name)
        self.launches.append({"name": name, "carveout": carveout, "shared_mem": shared_mem, "grid": grid})
        getattr(self, name)(grid, block, *args)

    # chase.cu
    def chase_init(self, grid, block, base, order, n, stride, skew):
        o = order.a.astype(np.int64)
        offsets = A.link_offset(o, int(stride), int(skew))
        here = offsets.astype(np.int64)
        assert here.max() + 8 <= base.a.nbytes, "ring beyond its buffer"
        words = base.u64()
        # link_offset is elementwise: the next link's offset is the offsets rolled (one pass less)
        words[here // 8] = np.uint64(base.ptr) + np.roll(offsets, -1)

    def _walk(self, start, steps):
        p, seen = int(start), []
        for _ in range(steps):
            arr, off = MEM.resolve(p)
            assert off % 8 == 0
            p = int(arr.u64()[off // 8])
            seen.append((arr, off))
        return p, seen

    def _chase(self, start, warm, n, lat, sink, cached):
        p, _ = self._walk(start, int(warm))
        p, seen = self._walk(p, int(n))
        arr = seen[0][0]
        links = len({off for _, off in seen})
        footprint = links * 128 if links < int(n) else arr.a.nbytes
        lvl = (32 if (cached and footprint <= 128 * KiB) else 280 if footprint <= L2 // 2
               else 510 if footprint <= L2 else 650)
        lat.a[:int(n)] = lvl + 6
        sink.u64()[0] = p
        return lvl, seen

    def _chase_window(self, start, warm, n, lat, sink, clk, min_window, cached):
        lvl, _ = self._chase(start, warm, n, lat, sink, cached)
        g0, c0 = self.now_ns, self.cycles(self.now_ns)
        span = max(int(int(n) * lvl * 1e3 / self.mhz), int(min_window))
        self.now_ns += span
        clk.u64()[:] = [g0, g0 + span, c0, c0 + self.cycles(span)]

    def chase_cg(self, grid, block, start, warm, n, gap, lat, sink, clk, min_window):
        self._chase_window(start, warm, n, lat, sink, clk, min_window, cached=False)

    def chase_ca(self, grid, block, start, warm, n, gap, lat, sink, clk, min_window):
        self._chase_window(start, warm, n, lat, sink, clk, min_window, cached=True)

    def timer_overhead(self, grid, block, n, lat, sink):
        lat.a[:int(n)] = 6

    def sm_clock_rate(self, grid, block, warm, spin, out):
        # the clock ramps linearly from idle_mhz to mhz over ramp_ns of spinning
        def cycles_between(t0, t1):
            def cum(t):
                if self.ramp_ns == 0:
                    return t * self.mhz / 1e3
                r = min(t, self.ramp_ns)
                ramp = r * (self.idle_mhz + (self.mhz - self.idle_mhz) * r / (2 * self.ramp_ns)) / 1e3
                return ramp + max(t - self.ramp_ns, 0) * self.mhz / 1e3
            return cum(t1) - cum(t0)

        w, s_ = int(warm), int(spin)
        out.u64()[:] = [s_, int(cycles_between(w, w + s_)), w]
        self.now_ns += w + s_

    # bandwidth.cu: blocks on SMs >= `below` leave; the others claim chunks from `work`
    def _stream(self, grid, block, nvec, reps, below, smids, work, *bufs):
        assert grid[0] == smids.a.size and work.a.size == 1 and work.a[0] == 0, "claim counter not zeroed"
        for b in bufs:
            assert int(nvec) * 16 <= b.a.nbytes, "stream beyond its buffer"
        assert int(nvec) % (block[0] * 4 * 16) == 0, "not whole chunks"
        sm = np.arange(grid[0]) % SMS
        smids.a[:] = np.where(sm < int(below), sm, 0xFFFFFFFF)
        work.a[0] = int(nvec) // (block[0] * 64) * int(reps) + int((sm < int(below)).sum())

    @staticmethod
    def _random(buf):
        head = buf.a[:1 << 16]
        assert np.unique(head).size > 200, "a streamed buffer holds zeros or a pattern, not random data"

    def bw_read(self, grid, block, src, nvec, reps, sleep, below, smids, work, sink):
        if int(nvec):
            self._random(src)
        self._stream(grid, block, nvec, reps, below, smids, work, src)

    def bw_write(self, grid, block, dst, nvec, reps, sleep, below, smids, work):
        self._stream(grid, block, nvec, reps, below, smids, work, dst)

    def bw_copy(self, grid, block, src, dst, nvec, reps, sleep, below, smids, work):
        self._random(src)
        self._stream(grid, block, nvec, reps, below, smids, work, src, dst)

    def fill_random(self, grid, block, buf, n_words, seed):
        words = buf.a.view(np.uint64)
        assert int(n_words) <= words.size
        # Random 64-bit words where the emulator reads them (`_random`: the first 65,536, all a
        # kernel here ever reads of a streamed buffer); the rest stays as allocated. Filling all
        # of a quick suite's two 1 GiB buffers cost ~35 s of CPU and 2 GiB of fresh pages a run.
        head = min(int(n_words), 1 << 16)
        words[:head] = np.random.default_rng(int(seed)).integers(0, 2**63, head, dtype=np.uint64)

    # loaded.cu: placement over a grid of 1-thread blocks (block b on SM b % SMS), window stamps
    def _place(self, grid, ctl, target):
        if int(target) == ANY_SM:  # an unpinned probe lands anywhere: here on the next SM each time
            sm = self.probe_sm
            self.probe_sm = (self.probe_sm + 1) % SMS
        else:
            sms = [b % SMS for b in range(grid[0])]
            if int(target) not in sms:
                ctl.a[C["CTL_MISSED"]] = grid[0]
                ctl.a[C["CTL_STOP"]] = ctl.a[C["CTL_READY"]] = 1
                return False
            sm = int(target)
        ctl.a[C["CTL_CLAIM"]] = 1
        ctl.a[C["CTL_PROBE_SM"]], ctl.a[C["CTL_READY"]] = sm, 1
        return True

    def _window(self, stats, span_ns, wait):
        self._loaded_launch += 1
        st = stats.u64()
        t0 = self.now_ns + (200_000 if wait else 0)
        st[C["ST_PROBE_START_NS"]], st[C["ST_PROBE_END_NS"]] = t0, t0 + span_ns
        st[C["ST_PROBE_START_CYCLES"]], st[C["ST_PROBE_END_CYCLES"]] = self.cycles(t0), self.cycles(t0 + span_ns)
        self._probe = (t0, t0 + span_ns, self._loaded_launch)
        self.now_ns = t0 + span_ns + 1000

    def loaded_chase(self, grid, block, start, warm, n, lat, sink, ctl, stats, target, wait, settle, timeout):
        assert block == (1,)
        if not self._place(grid, ctl, target):
            return
        lvl, seen = self._chase(start, warm, n, lat, sink, cached=False)
        self.hbm_starts.append(int(start))
        self.hbm_lines.append({off for _, off in seen})
        self._window(stats, int(int(n) * lvl * 1e3 / self.mhz), int(wait))
        ctl.a[C["CTL_STOP"]] = 1

    def retouch_probe(self, grid, block, ring, lines, rounds, intervals, prime_lat, prime_start, re_lat, re_start,
                      hot, hot_warm, hot_cap, hot_lat, hot_count, sink, ctl, stats, target, wait, settle, timeout):
        assert block == (1,)
        if not self._place(grid, ctl, target):
            return
        n_lines, n_rounds = int(lines), int(rounds)
        iv = intervals.a[:n_rounds].astype(np.int64)
        p = int(ring)
        t = 0
        for r in range(n_rounds):  # each round: fresh lines along the ring, primed then re-touched
            nxt, seen = self._walk(p, n_lines)
            again, seen2 = self._walk(p, n_lines)
            assert seen == seen2 and nxt == again, "the re-touch walks other lines than the prime"
            sl = slice(r * n_lines, (r + 1) * n_lines)
            prime_lat.a[sl] = 650 + 6
            starts = t + np.arange(n_lines) * 650
            prime_start.a[sl] = (self.cycles(self.now_ns) + starts) % 2**32
            age_ns = n_lines * 650 * 1e3 / self.mhz + iv[r]
            re_start.a[sl] = (prime_start.a[sl].astype(np.int64) + self.cycles(age_ns)) % 2**32
            re_lat.a[sl] = (280 if age_ns < self.retouch_tau_ns else 650) + 6
            t += 2 * n_lines * 650 + self.cycles(iv[r])
            p = nxt
        n_hot = min(int(hot_cap), 64)
        hot_lat.a[:n_hot] = 280 + 6
        hot_count.a[0] = n_hot
        self._window(stats, int(t * 1e3 / self.mhz), int(wait))
        ctl.a[C["CTL_STOP"]] = 1

    def saturator_copy(self, grid, block, src, dst, nvec, sleep, below, ctl, stats, max_ns):
        assert int(nvec) * 16 <= dst.a.nbytes and dst.ptr != src.ptr
        self.saturator_read(grid, block, src, nvec, sleep, below, ctl, stats, max_ns, None)

    def saturator_read(self, grid, block, src, nvec, sleep, below, ctl, stats, max_ns, sink):
        assert int(nvec) * 16 <= src.a.nbytes and int(nvec) % (grid[0] * block[0] * 4) == 0
        assert int(below) == 0xFFFFFFFF  # all SMs (the probe's is left by placement)
        self._random(src)
        per_sm = grid[0] // SMS
        probe = ctl.a[C["CTL_PROBE_SM"]] != ANY_SM
        if ctl.a[C["CTL_READY"]] == 1 and probe:
            ctl.a[C["CTL_LEFT"]] += per_sm
            ctl.a[C["CTL_STARTED"]] += grid[0] - per_sm
        else:
            ctl.a[C["CTL_STARTED"]] += grid[0]
        gbs = 4000.0 / (1 + int(sleep) / 1000)
        st = stats.u64()
        if probe and self._probe is not None:
            p0, p1, k = self._probe
            late = k in self.late_saturator
            t0 = p1 + 5_000 if late else p0 - 150_000
            t1 = max(p1, t0) + 2_000
            st[C["ST_SAT_AT_PROBE_START"]] = 0 if late else grid[0] - per_sm
        else:
            t0 = self.now_ns
            t1 = t0 + 1_000_000
        st[C["ST_BYTES"]] += np.uint64(int(gbs * (t1 - t0)))
        st[C["ST_SAT_FIRST_START"]] = min(int(st[C["ST_SAT_FIRST_START"]]), t0)
        st[C["ST_SAT_FIRST_END"]] = min(int(st[C["ST_SAT_FIRST_END"]]), t1)
        st[C["ST_SAT_LAST_END"]] = max(int(st[C["ST_SAT_LAST_END"]]), t1)
        self.now_ns = max(self.now_ns, t1)


class FakeRawKernel:
    """CuPy's RawKernel as RawModule.get_function returns it (cupy/_core/raw.pyx): called as
    kernel(grid, block, args, shared_mem=0); `attributes` is a read-only dict of the
    cuFuncGetAttribute values; only `max_dynamic_shared_size_bytes` and
    `preferred_shared_memory_carveout` can be set ("the only two currently settable in CUDA",
    raw.pyx), through cuFuncSetAttribute. CUDA driver API (cuFuncSetAttribute): the carveout is a
    percentage 0..100 or -1 (CU_SHAREDMEM_CARVEOUT_DEFAULT; 0 = CU_SHAREDMEM_CARVEOUT_MAX_L1);
    max dynamic shared memory plus the static size cannot exceed
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, and is 48 KiB less the static size
    until a kernel opts in (CUDA C++ Programming Guide: allocations above 48 KB per block need
    dynamic shared memory and an explicit opt-in); a launch asking for more fails
    (CUDA_ERROR_INVALID_VALUE)."""

    _SETTABLE = ("max_dynamic_shared_size_bytes", "preferred_shared_memory_carveout")

    def __init__(self, emulator, name, optin):
        object.__setattr__(self, "_state", {"emulator": emulator, "name": name, "optin": optin,
                                            "static": STATIC_SMEM.get(name, 0), "carveout": -1})
        self._state["dynamic"] = 48 * KiB - self._state["static"]

    @property
    def attributes(self) -> dict:
        st = self._state
        return {"max_threads_per_block": 1024, "shared_size_bytes": st["static"], "const_size_bytes": 0,
                "local_size_bytes": 0, "num_regs": 32, "ptx_version": 90, "binary_version": 90,
                "cache_mode_ca": 0, "max_dynamic_shared_size_bytes": st["dynamic"],
                "preferred_shared_memory_carveout": st["carveout"]}

    @property
    def max_dynamic_shared_size_bytes(self):
        return self._state["dynamic"]

    @property
    def preferred_shared_memory_carveout(self):
        return self._state["carveout"]

    def __setattr__(self, key, value):
        st = self._state
        if key not in self._SETTABLE:
            raise AttributeError(f"attribute '{key}' of 'cupy._core.raw.RawKernel' objects is not writable")
        if key == "preferred_shared_memory_carveout":
            if not (value == -1 or 0 <= value <= 100):
                raise RuntimeError("CUDA_ERROR_INVALID_VALUE: invalid argument")
            st["carveout"] = int(value)
        else:
            if value < 0 or value + st["static"] > st["optin"]:
                raise RuntimeError("CUDA_ERROR_INVALID_VALUE: invalid argument")
            st["dynamic"] = int(value)

    def __call__(self, grid, block, args, shared_mem=0):
        st = self._state
        if shared_mem > st["dynamic"]:
            raise RuntimeError(f"CUDA_ERROR_INVALID_VALUE: {st['name']} launched with {shared_mem} B of dynamic "
                               f"shared memory beyond its max_dynamic_shared_size_bytes {st['dynamic']}")
        st["emulator"].launch(st["name"], grid, block, args, shared_mem=shared_mem, carveout=st["carveout"])


#: cudaDeviceProp of the emulated device (an H200's shared-memory sizes, a small L2 and 4 SMs), with
#: the keys CuPy's runtime.getDeviceProperties returns (cupy_backends/cuda/api/runtime.pyx: l2CacheSize,
#: sharedMemPerMultiprocessor, sharedMemPerBlockOptin, reservedSharedMemPerBlock, ...).
PROPS = {"name": b"NVIDIA H200 (emulated)", "major": 9, "minor": 0, "multiProcessorCount": SMS,
         "l2CacheSize": L2, "sharedMemPerMultiprocessor": 228 * KiB, "sharedMemPerBlockOptin": 227 * KiB,
         "reservedSharedMemPerBlock": KiB, "sharedMemPerBlock": 48 * KiB}


def make_fake_cupy(emulator: Emulator):
    cp = types.ModuleType("cupy")
    cp.uint8, cp.uint32, cp.uint64, cp.int64 = np.uint8, np.uint32, np.uint64, np.int64
    cp.zeros = lambda n, dtype=np.float64: FakeArray(MEM, np.zeros(n, dtype=dtype))
    cp.empty = cp.zeros
    cp.asarray = lambda a: FakeArray(MEM, np.array(a))
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)

    class RandomState:
        def __init__(self, seed):
            self.rng = np.random.default_rng(seed)

        def permutation(self, n):
            return FakeArray(MEM, self.rng.permutation(n))

    class RawModule:
        def __init__(self, code, options=(), name_expressions=None):
            assert "#include" not in code and all(isinstance(o, str) for o in options)
            self.names = set(_PARAM_NAMES.findall(code))

        def get_function(self, name):
            assert name in self.names, name
            return FakeRawKernel(emulator, name, PROPS["sharedMemPerBlockOptin"])

    class Ctx:
        def __init__(self, *a, **k):
            self.ptr = 0
            # cupy.cuda.Device(i).pci_bus_id: cudaDeviceGetPCIBusId's "dddd:bb:dd.f" (fake NVML's GPU 0)
            self.pci_bus_id = "0000:18:00.0"

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def use(self):
            return None

        def synchronize(self):
            return None

        def record(self, stream=None):
            return None

    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1, getDeviceProperties=lambda i: PROPS, memGetInfo=lambda: (8 << 30, 9 << 30),
        memcpyDeviceToDevice=3, deviceSynchronize=lambda: None,
        memcpyAsync=lambda dst, src, n, kind, stream: emulator.calls.append("memcpy"))
    cp.random = types.SimpleNamespace(RandomState=RandomState)
    cp.RawModule = RawModule
    cp.cuda = types.SimpleNamespace(runtime=runtime, Device=Ctx, Stream=Ctx, Event=Ctx,
                                    get_elapsed_time=lambda a, b: 0.5)
    return cp


_PARAM_NAMES = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\)\s*)?(\w+)\(')


@pytest.fixture
def emulated(monkeypatch):
    emulator = Emulator()
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy(emulator))
    gpu.load_module.cache_clear()
    yield emulator
    gpu.load_module.cache_clear()


def test_signatures_are_parsed_from_the_sources():
    sigs = signatures()
    assert set(sigs) == {e for entries in K.KERNEL_FILES.values() for e in entries}
    assert sigs["chase_init"] == ["ptr", "ptr", "u64", "u64", "u64"]
    assert sigs["loaded_chase"][-3:] == ["u32", "u64", "u64"]


def test_probes_launch_with_the_declared_arguments(emulated):
    from sitsprof.probes.gpu import Probes
    from sitsprof.probes.plan import BandwidthPlan, ChaseSweep, LatencyPlan, StreamConfig, TlbPlan

    p = Probes(0)
    assert p.limits.sm_count == SMS and p.limits.is_hopper
    facts = p.calibrate(1_000_000, 64)
    assert facts["sm_clock_mhz"] == pytest.approx(1980) and facts["timer_overhead_cycles"] == 6

    lat = p.latency(LatencyPlan(ChaseSweep([16 * KiB, 256 * KiB, 2 * MiB], samples=4096, warm_full_bytes=L2)))
    assert set(lat) == {"latency", "latency_cg"}
    med = lat["latency"].groupby("footprint_bytes")["latency_cycles"].median()
    assert med.tolist() == [32, 280, 650]  # the emulator's model, overhead subtracted
    assert lat["latency_cg"]["latency_cycles"].iloc[0] == 280

    tlb = p.tlb(TlbPlan([ChaseSweep([4 * MiB, 8 * MiB], stride=2 * MiB, skew=17 * 128, samples=8)]))
    assert sorted(tlb["footprint_bytes"].unique()) == [4 * MiB, 8 * MiB]

    bw = p.bandwidth(BandwidthPlan(4 * MiB, [StreamConfig(active_sms=SMS, blocks_per_sm=1, threads=256),
                                            StreamConfig(active_sms=2, blocks_per_sm=1, threads=256)], reps=2))
    assert set(bw["kernel"]) == {"read", "write", "copy", "memcpy"}
    assert bw.loc[bw["kernel"] == "read", "sms_used"].tolist() == [SMS, SMS, 2, 2]
    assert bw.loc[bw["kernel"] == "read", "blocks"].tolist() == [SMS, SMS, 2, 2]  # blocks that worked
    assert p.sm_threshold(2) == 2 and p.sm_threshold(SMS) == 0xFFFFFFFF
    assert "memcpy" in emulated.calls

    out = p.loaded(small_loaded_plan(targets=[0.5, 1.0], samples=256))
    table = out["loaded"]
    assert out["peak_gbs"] == pytest.approx(4000)
    assert sorted(table["level"].unique()) == [0, 1, 2]
    assert set(table["access"]) == {"hbm", "hot", "retouch"}
    loaded = table[table["level"] > 0]
    assert (loaded["probe_sm"] == 3).all() and (loaded["blocks_left_probe_sm"] == 2).all()
    assert (loaded["saturator_blocks"] == 2 * SMS - 2).all()
    assert (table.loc[table["level"] == 0, "achieved_gbs"] == 0).all()
    assert table["valid"].all() and (table["invalid_reason"] == "").all()
    fracs = loaded.groupby("level")["bandwidth_fraction"].first()
    assert fracs[1] == pytest.approx(0.5, rel=0.02) and fracs[2] == pytest.approx(1.0)
    assert (table.loc[table["access"] == "hot", "latency_cycles"] == 280).all()  # the hot set hits
    rt = table[table["access"] == "retouch"]
    # the emulator keeps a line 100 us: re-touched right away it hits, after 200 us it misses
    assert (rt.loc[rt["interval_ns"] == 0, "latency_cycles"] == 280).all()
    assert (rt.loc[rt["interval_ns"] == 200_000, "latency_cycles"] == 650).all()
    assert (rt["age_ns"] > rt["interval_ns"]).all() and (rt["prime_latency_cycles"] == 650).all()
    assert (table.loc[table["access"] != "retouch", "interval_ns"] == -1).all()
    assert "replacement_delay_cycles" not in table.columns  # derived by the reports, not a raw column

    copy = p.loaded(small_loaded_plan(targets=[1.0], samples=64, saturator_kind="copy"))
    assert "saturator_copy" in emulated.calls and set(copy["loaded_calibration"]["saturator"]) == {"copy"}


def small_loaded_plan(**kw):
    from sitsprof.probes.plan import LoadedPlan, StreamConfig

    args = dict(hbm_footprint=2 * MiB, retouch_bytes=256 * KiB, saturator_bytes=4 * MiB, samples=256,
                calibration_sleeps_ns=[0, 1000, 3000], intervals_ns=(0, 50_000, 200_000), interval_reps=2,
                retouch_lines=16, hot_samples=128,
                saturator=StreamConfig(active_sms=0, blocks_per_sm=2, threads=256))
    args.update(kw)
    return LoadedPlan(**args)


def test_chase_kernels_run_with_the_largest_l1(emulated):
    """Issue 10.6: the chase kernels run with preferred shared-memory carveout 0 (as much L1 as
    the SM allows, as gpu-benches sets it); the streaming kernels keep the driver's default."""
    from sitsprof.probes.gpu import L1_KERNELS, Probes
    from sitsprof.probes.plan import ChaseSweep, LatencyPlan

    p = Probes(0)
    p.latency(LatencyPlan(ChaseSweep([16 * KiB, 256 * KiB], samples=64, warm_full_bytes=L2)))
    p.loaded(small_loaded_plan(targets=[1.0], samples=64))
    launched = {}
    for rec in emulated.launches:
        launched.setdefault(rec["name"], set()).add(rec["carveout"])
    for name in ("chase_ca", "chase_cg", "timer_overhead", "loaded_chase", "retouch_probe"):
        assert name in L1_KERNELS and launched[name] == {0}, (name, launched.get(name))
    for name in ("saturator_read", "chase_init", "sm_clock_rate"):
        assert launched[name] == {-1}, name


def test_stand_in_kernel_attributes_follow_cupy():
    """The stand-in's RawKernel: two settable attributes, CUDA's value checks (cited in the class)."""
    k = FakeRawKernel(Emulator(), "saturator_read", 227 * KiB)
    assert k.preferred_shared_memory_carveout == -1 and k.max_dynamic_shared_size_bytes == 48 * KiB - 16
    k.preferred_shared_memory_carveout = 0
    assert k.attributes["preferred_shared_memory_carveout"] == 0
    with pytest.raises(RuntimeError, match="INVALID_VALUE"):
        k.preferred_shared_memory_carveout = 101
    with pytest.raises(RuntimeError, match="INVALID_VALUE"):
        k.max_dynamic_shared_size_bytes = 227 * KiB
    with pytest.raises(AttributeError, match="not writable"):
        k.num_regs = 3
    with pytest.raises(RuntimeError, match="beyond its max_dynamic_shared_size_bytes"):
        k((1,), (1,), (), shared_mem=60 * KiB)


def test_loaded_levels_outside_the_saturator_window_are_marked_and_rerun(emulated):
    """Issue 10.7: every chase records both windows (%globaltimer); a chase whose window is not
    inside the saturator's is kept with valid=False and its reason, and rerun; the saturator runs
    with the planner's dynamic shared memory (opted in above 48 KiB); all chases run on the SM of
    the first idle one."""
    from sitsprof.probes.gpu import Probes

    p = Probes(0)
    plan = small_loaded_plan(targets=[0.5, 1.0], samples=128)
    # loaded launches are counted 1..: level 0 hbm, level 0 retouch, level 1 hbm (the third) ...
    emulated.late_saturator = {3}
    table = p.loaded(plan)["loaded"]
    assert list(table.columns) == list(A.LOADED_COLUMNS)  # the documented order (docs/run-directory.md)
    for col in ("probe_start_ns", "probe_end_ns", "saturator_start_ns", "saturator_end_ns",
                "saturator_last_end_ns", "saturator_blocks_at_probe_start", "attempt", "valid", "invalid_reason"):
        assert col in table.columns, col
    chases = table.groupby(["level", "access", "attempt"]).first().reset_index()
    bad = chases[~chases["valid"]]
    assert len(bad) == 1 and (bad["level"] == 1).all() and (bad["access"] == "hbm").all()
    assert "had not started" in bad["invalid_reason"].iloc[0]
    assert (bad["saturator_start_ns"] > bad["probe_start_ns"]).all()
    rerun = chases[(chases["level"] == 1) & (chases["access"] == "hbm") & (chases["attempt"] == 1)]
    assert len(rerun) == 1 and rerun["valid"].all()
    good = chases[chases["valid"] & (chases["level"] > 0)]
    assert ((good["saturator_start_ns"] <= good["probe_start_ns"])
            & (good["probe_end_ns"] <= good["saturator_end_ns"])).all()
    assert (table["probe_sm"] == 3).all()  # the baseline's SM, for every level
    pinned = [r for r in emulated.launches if r["name"] in ("loaded_chase", "retouch_probe")][1:]
    assert all(r["grid"] == (2 * SMS,) for r in pinned)  # a grid that reaches every SM, one block claims it
    shared = {r["shared_mem"] for r in emulated.launches if r["name"] == "saturator_read"}
    limits = p.limits
    want = plan.for_device(limits).__class__(**{**plan.__dict__, "probe_shared_bytes": 16392}).saturator_shared_bytes(
        limits, 16)
    assert shared == {want} and want > 48 * KiB
    assert 2 * (want + 16 + KiB) + 16392 + KiB <= PROPS["sharedMemPerMultiprocessor"]
    assert 3 * (want + 16 + KiB) > PROPS["sharedMemPerMultiprocessor"]


def test_clock_measured_after_warm_up_and_cycles_converted_per_chase(emulated):
    """Issue 10.9: the SM clock is measured after a warm-up spin (the clock ramps from idle), and
    each chase converts its cycles to ns with its own %globaltimer/clock64 window."""
    from sitsprof.probes.gpu import Probes
    from sitsprof.probes.plan import ChaseSweep, LatencyPlan

    emulated.idle_mhz, emulated.ramp_ns = 900.0, 100_000_000
    p = Probes(0)
    assert p.calibrate()["sm_clock_mhz"] == pytest.approx(1980, rel=1e-3)  # not the ramp's average
    emulated.mhz = 1500.0  # the clock moved (no lock): cycles of later chases are at 1500 MHz
    lat = p.latency(LatencyPlan(ChaseSweep([16 * KiB, 2 * MiB], samples=64, warm_full_bytes=L2)))["latency"]
    assert (lat["clock_source"] == "chase").all()
    assert lat["chase_mhz"].to_numpy() == pytest.approx(1500, rel=1e-3)
    assert lat["latency_ns"].to_numpy() == pytest.approx(lat["latency_cycles"].to_numpy() / 1.5, rel=1e-3)
    assert ((lat["chase_end_ns"] - lat["chase_start_ns"]) >= A.MIN_CLOCK_WINDOW_NS).all()


def test_bandwidth_buffers_are_random_and_hbm_chases_start_afresh(emulated):
    """Issue 10.12: bandwidth and saturator buffers hold random data (the stand-in refuses a
    streamed buffer of zeros), and each HBM chase starts at a new ring position (no line of one
    level's chase is walked again at the next)."""
    from sitsprof.probes.gpu import Probes
    from sitsprof.probes.plan import BandwidthPlan, StreamConfig

    p = Probes(0)
    p.bandwidth(BandwidthPlan(4 * MiB, [StreamConfig(active_sms=SMS, blocks_per_sm=1, threads=256)], reps=1))
    assert emulated.calls.index("fill_random") < emulated.calls.index("bw_read")
    p.loaded(small_loaded_plan(targets=[0.5, 1.0], samples=64))
    assert len(set(emulated.hbm_starts)) == len(emulated.hbm_starts) == 3
    for a, b in zip(emulated.hbm_lines, emulated.hbm_lines[1:]):
        assert not a & b


def test_device_limits_come_from_the_device(emulated):
    """Issue 10.12: the L2 size and shared-memory sizes are the device's (cudaDeviceProp)."""
    from sitsprof.probes.gpu import device_limits

    lim = device_limits(0)
    assert lim.l2_bytes == L2 and lim.shared_per_sm == 228 * KiB
    assert lim.shared_per_block_optin == 227 * KiB and lim.reserved_shared_per_block == KiB


def test_sitsprof_run_end_to_end_on_emulated_kernels(emulated, fake_gpu, tmp_path, capsys):
    from sitsprof.cli.main import main
    from sitsprof.collectors.rundir import open_run

    code = main(["probe", "latency", "--quick", "--max-footprint", "4MiB", "--clocks", "max",
                 "--out", str(tmp_path), "--name", "emulated"])
    err = capsys.readouterr().err
    assert code == 0, err
    run = open_run(tmp_path / "emulated")
    assert run.complete and run.meta["sm_clock_mhz"] == pytest.approx(1980)
    assert run.meta["clocks"]["mode"] == "lock"
    assert {"latency", "latency_cg"} == set(run.tables("probe"))  # raw tables only
    assert "nvml" in run.tables("sampler")
    assert run.meta["clocks"]["applied"]["sm_mhz"] == 1980  # locked to max during the run
    assert fake_gpu.state["devices"][0]["locked_gpu"] is None  # and restored after it


@pytest.mark.slow  # ~16 s: a whole emulated `sitsprof run` with the samplers running
def test_sitsprof_run_phases_line_up_with_the_sampler_clock(emulated, fake_gpu, tmp_path, capsys):
    """The suite records its phases' origin on the samplers' monotonic clock; the report uses it."""
    from sitsprof.cli.main import main
    from sitsprof.collectors.rundir import open_run
    from sitsprof.reports.analysis import analyze_run
    from sitsprof.reports.run_report import timeline_figures

    code = main(["run", "--parts", "latency,bandwidth", "--clocks", "none", "--out", str(tmp_path),
                 "--name", "aligned"])
    assert code == 0, capsys.readouterr().err
    run = open_run(tmp_path / "aligned")
    meta = run.meta
    origin = meta["phases_origin_ns"]
    assert isinstance(origin, int)
    assert [p["name"] for p in meta["phases"]] == ["calibrate", "latency", "bandwidth"]
    t_ns = run.read_table("nvml", "sampler")["t_ns"].to_numpy()
    assert len(t_ns) >= 1
    sampler = meta["samplers"]["nvml"]
    # The samplers started before the suite and stopped after it, on the same clock.
    assert t_ns.min() <= origin + int(meta["phases"][0]["start_s"] * 1e9)
    assert origin + int(meta["phases"][-1]["end_s"] * 1e9) <= t_ns.min() + int(sampler["elapsed_s"] * 1e9)

    res = analyze_run(run.path)
    assert res.phases_aligned
    xs = res.samplers["nvml"]["power_w"][0]
    # Sampler rows are placed at (t_ns - phases_origin_ns) seconds: exactly the phases' time base.
    assert min(xs) == pytest.approx((t_ns.min() - origin) / 1e9)
    fig = timeline_figures(res)[0]
    assert "first sample" not in fig.caption
    spans = [(s["x0"], s["x1"]) for s in fig.layout["shapes"]]
    assert spans == [(p["start_s"], p["end_s"]) for p in meta["phases"]]
