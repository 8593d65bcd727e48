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

from sitsprof.probes import tables as A
from sitsprof.probes import gpu
from sitsprof.probes import kernels as K

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

    def get(self):
        return self.a.copy()

    def __getitem__(self, idx):
        if isinstance(idx, slice):  # a view: same memory, pointer moved to its first element
            view = object.__new__(FakeArray)
            view.a = self.a[idx]
            view.ptr = self.ptr + (idx.start or 0) * self.a.itemsize
            view.data = types.SimpleNamespace(ptr=view.ptr)
            view.dtype = self.a.dtype
            return view
        return types.SimpleNamespace(get=lambda: self.a[idx])

    def fill(self, value):
        self.a[:] = value

    def astype(self, dtype):
        return FakeArray(MEM, self.a.astype(dtype))

    def u64(self) -> np.ndarray:
        return self.a.view(np.uint64)


MEM = Memory()


class Emulator:
    """Python versions of the kernels, with the model latencies of a Hopper-like ladder."""

    def __init__(self):
        self.sigs = signatures()
        self.calls: list[str] = []

    def launch(self, name, grid, block, args):
        kinds = self.sigs[name]
        assert len(args) == len(kinds), (name, len(args), kinds)
        for k, (kind, arg) in enumerate(zip(kinds, args)):
            want = {"ptr": FakeArray, "u32": np.uint32, "u64": np.uint64}[kind]
            assert type(arg) is want, f"{name} argument {k}: {type(arg).__name__} where the C signature has {kind}"
        self.calls.append(name)
        getattr(self, name)(grid, block, *args)

    # chase.cu
    def chase_init(self, grid, block, base, order, n, stride, skew):
        o = order.a.astype(np.int64)
        here = A.link_offset(o, int(stride), int(skew)).astype(np.int64)
        assert here.max() + 8 <= base.a.nbytes, "ring beyond its buffer"
        words = base.u64()
        words[here // 8] = np.uint64(base.ptr) + A.link_offset(np.roll(o, -1), int(stride), int(skew))

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
        lvl = 32 if (cached and footprint <= 128 * KiB) else 280 if footprint <= L2 // 2 else 510 if footprint <= L2 else 650
        lat.a[:] = lvl + 6
        sink.u64()[0] = p

    def chase_cg(self, grid, block, start, warm, n, gap, lat, sink):
        self._chase(start, warm, n, lat, sink, cached=False)

    def chase_ca(self, grid, block, start, warm, n, gap, lat, sink):
        self._chase(start, warm, n, lat, sink, cached=True)

    def timer_overhead(self, grid, block, n, lat, sink):
        lat.a[:int(n)] = 6

    def sm_clock_rate(self, grid, block, spin, out):
        out.u64()[:] = [int(spin), int(spin) * 198 // 100]

    # bandwidth.cu: blocks on SMs >= `below` leave; the others claim chunks from `work`
    def _stream(self, grid, block, nvec, reps, below, smids, work, *bufs):
        assert grid[0] == smids.a.size and work.a.size == 1 and work.a[0] == 0, "claim counter not zeroed"
        for b in bufs:
            assert int(nvec) * 16 <= b.a.nbytes, "stream beyond its buffer"
        assert int(nvec) % (block[0] * 4 * 16) == 0, "not whole chunks"
        sm = np.arange(grid[0]) % SMS
        smids.a[:] = np.where(sm < int(below), sm, 0xFFFFFFFF)
        work.a[0] = int(nvec) // (block[0] * 64) * int(reps) + int((sm < int(below)).sum())

    def bw_read(self, grid, block, src, nvec, reps, sleep, below, smids, work, sink):
        self._stream(grid, block, nvec, reps, below, smids, work, src)

    def bw_write(self, grid, block, dst, nvec, reps, sleep, below, smids, work):
        self._stream(grid, block, nvec, reps, below, smids, work, dst)

    def bw_copy(self, grid, block, src, dst, nvec, reps, sleep, below, smids, work):
        self._stream(grid, block, nvec, reps, below, smids, work, src, dst)

    # loaded.cu: ctl = [probe_sm, ready, stop, started, left]; stats = [bytes, t0, t1, probe t0, probe t1]
    def loaded_chase(self, grid, block, start, warm, n, gap, lat, sink, ctl, stats, wait, settle, timeout):
        assert grid == (1,) and block == (1,)
        ctl.a[0], ctl.a[1] = 3, 1
        self._chase(start, warm, n, lat, sink, cached=False)
        ctl.a[2] = 1

    def saturator_copy(self, grid, block, src, dst, nvec, sleep, below, ctl, stats, max_ns):
        assert int(nvec) * 16 <= dst.a.nbytes and dst.ptr != src.ptr
        self.saturator_read(grid, block, src, nvec, sleep, below, ctl, stats, max_ns, None)

    def saturator_read(self, grid, block, src, nvec, sleep, below, ctl, stats, max_ns, sink):
        assert int(nvec) * 16 <= src.a.nbytes and int(nvec) % (grid[0] * block[0] * 4) == 0
        assert int(below) == 0xFFFFFFFF  # all SMs (the probe's is left by placement)
        per_sm = grid[0] // SMS
        if ctl.a[1] == 1 and ctl.a[0] != 0xFFFFFFFF:
            ctl.a[4] += per_sm
            ctl.a[3] += grid[0] - per_sm
        else:
            ctl.a[3] += grid[0]
        gbs = 4000.0 / (1 + int(sleep) / 1000)
        st = stats.a
        st[0] += np.uint64(int(gbs * 1e6))
        st[1], st[2] = 1000, 1000 + 1_000_000


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
            return lambda grid, block, args: emulator.launch(name, grid, block, args)

    class Ctx:
        def __init__(self, *a, **k):
            self.ptr = 0

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

    props = {"name": b"NVIDIA H200 (emulated)", "major": 9, "minor": 0, "multiProcessorCount": SMS,
             "l2CacheSize": L2}
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1, getDeviceProperties=lambda i: props, memGetInfo=lambda: (8 << 30, 9 << 30),
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
    from sitsprof.probes.plan import BandwidthPlan, ChaseSweep, LatencyPlan, LoadedPlan, StreamConfig, TlbPlan

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

    out = p.loaded(LoadedPlan(hbm_footprint=2 * MiB, retouch_bytes=64 * KiB, saturator_bytes=4 * MiB,
                              targets=[0.5, 1.0], samples=256, calibration_sleeps_ns=[0, 1000, 3000],
                              saturator=StreamConfig(active_sms=0, blocks_per_sm=2, threads=256)))
    table = out["loaded"]
    assert out["peak_gbs"] == pytest.approx(4000)
    assert sorted(table["level"].unique()) == [0, 1, 2]
    loaded = table[table["level"] > 0]
    assert (loaded["probe_sm"] == 3).all() and (loaded["blocks_left_probe_sm"] == 2).all()
    assert (loaded["saturator_blocks"] == 2 * SMS - 2).all()
    assert (table.loc[table["level"] == 0, "achieved_gbs"] == 0).all()
    fracs = loaded.groupby("level")["bandwidth_fraction"].first()
    assert fracs[1] == pytest.approx(0.5, rel=0.02) and fracs[2] == pytest.approx(1.0)
    rt = table[table["access"] == "retouch"]
    assert (rt["latency_cycles"] == 280).all()  # the emulator's re-touches all hit: no replacement delay
    assert "replacement_delay_cycles" not in table.columns  # derived by the reports, not a raw column

    copy = p.loaded(LoadedPlan(hbm_footprint=2 * MiB, retouch_bytes=64 * KiB, saturator_bytes=4 * MiB,
                               targets=[1.0], samples=64, calibration_sleeps_ns=[0, 1000],
                               saturator=StreamConfig(active_sms=0, blocks_per_sm=2, threads=256),
                               saturator_kind="copy"))
    assert "saturator_copy" in emulated.calls and set(copy["loaded_calibration"]["saturator"]) == {"copy"}


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
