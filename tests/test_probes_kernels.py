"""The probe kernels compile for sm_90 without spills, and their SASS does what the probes claim.

Each kernel file is compiled once per session (nvcc when on PATH, else NVRTC from the
nvidia-cuda-nvrtc wheel); NVRTC is also checked on its own when both exist, since CuPy
compiles the same text with NVRTC on the GPU. SASS comes from the nvidia-cuda-cuobjdump wheel.
"""
from __future__ import annotations

import re

import pytest

from sitsprof.probes import kernels as K

COMPILER = K.available_compiler()
pytestmark = pytest.mark.skipif(COMPILER is None, reason="neither nvcc nor the nvidia-cuda-nvrtc wheel is available")


@pytest.fixture(scope="session")
def cubins() -> dict[str, K.CompileResult]:
    return {name: K.compile_cubin(name, "sm_90") for name in K.KERNEL_FILES}


@pytest.fixture(scope="session")
def sass(cubins) -> dict[str, list[str]]:
    """Instructions per entry point (one cuobjdump call per file)."""
    if K.cuobjdump_path() is None:
        pytest.skip("cuobjdump (nvidia-cuda-cuobjdump wheel) not found")
    out: dict[str, list[str]] = {}
    for result in cubins.values():
        try:
            text = K.disassemble(result.cubin)
        except K.CompileError as exc:
            if "nvdisasm" not in str(exc):
                raise
            pytest.skip(str(exc))
        for block in re.split(r"\n\s*Function : ", text)[1:]:
            fn, _, body = block.partition("\n")
            # drop guard predicates (@P2, @!P0): the tests look at the operation
            out[fn.strip()] = [re.sub(r"^@!?U?P\w+\s+", "", i) for i in K.sass_instructions(body)]
    return out


def test_sources_inline_their_header_once():
    for name in K.KERNEL_FILES:
        src = K.kernel_source(name)
        assert "#include" not in src
        assert "#pragma once" not in src
        assert "__device__ __forceinline__ u64 load_cg" in src


@pytest.mark.parametrize("name", list(K.KERNEL_FILES))
def test_every_entry_point_compiles_without_spills(cubins, name):
    usage = cubins[name].resource_usage()
    assert set(usage) == set(K.KERNEL_FILES[name])
    for fn, u in usage.items():
        assert u["spill_stores"] == 0 and u["spill_loads"] == 0, (fn, u)
        assert u["stack"] == 0, (fn, u)
        assert 0 < u["registers"] <= 64, (fn, u)


def test_nvrtc_builds_the_same_text_without_spills(cubins):
    if K.nvrtc_library() is None:
        pytest.skip("nvidia-cuda-nvrtc wheel not installed")
    if COMPILER == "nvrtc":
        results = cubins
    else:
        results = {name: K.compile_cubin(name, "sm_90", compiler="nvrtc") for name in K.KERNEL_FILES}
    for name, result in results.items():
        assert result.compiler == "nvrtc"
        usage = result.resource_usage()
        assert set(usage) == set(K.KERNEL_FILES[name])
        assert all(u["spill_stores"] == 0 and u["spill_loads"] == 0 for u in usage.values()), usage


def test_parse_ptxas_log():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers"""
    assert K.parse_ptxas_log(log) == {"k": {"stack": 8, "spill_stores": 4, "spill_loads": 4, "registers": 40}}


def _loads(instrs):
    return [i for i in instrs if i.startswith("LDG")]


def test_cg_chase_loads_bypass_l1(sass):
    for fn in ("chase_cg", "loaded_chase", "retouch_probe"):
        chase = [i for i in _loads(sass[fn]) if i.startswith("LDG.E.64")]
        assert chase, fn
        assert all(i.startswith("LDG.E.64.STRONG.GPU ") for i in chase), (fn, chase)


def test_default_cached_chase_uses_plain_loads(sass):
    loads = _loads(sass["chase_ca"])
    assert loads and all(i.startswith("LDG.E.64 ") for i in loads), loads


def test_timers_are_cs2r_clocklo_only(sass):
    for fn in ("chase_cg", "chase_ca", "timer_overhead", "loaded_chase", "retouch_probe"):
        clocks = [i for i in sass[fn] if "SR_CLOCKLO" in i]
        assert len(clocks) >= 2, fn
        assert all(i.startswith("CS2R") for i in clocks), (fn, clocks)


def _reg(operand: str) -> str:
    return re.match(r"\s*(R\d+)", operand).group(1)


def test_second_timer_waits_for_the_load(sass):
    """Between two clock reads around a load, a shared store of the loaded register comes first,
    so the second read cannot issue before the load completes; the next load's address
    is the loaded value (the chase serializes)."""
    for fn in ("chase_cg", "chase_ca", "loaded_chase", "retouch_probe"):
        ins = sass[fn]
        clocks = [k for k, i in enumerate(ins) if "SR_CLOCKLO" in i]
        timed = 0
        for a, b in zip(clocks, clocks[1:]):
            window = ins[a + 1:b]
            loads = [i for i in window if i.startswith("LDG.E.64")]
            if not loads:
                continue
            # a timed window ends with a shared store of a loaded register; a window without one
            # runs between two timed accesses (retouch_probe's untimed hot-set steps, its interval read)
            def stored_after(j, window=window):
                d = _reg(window[j].split(None, 1)[1])
                return any(i.startswith("STS") and i.endswith(f", {d}") for i in window[j + 1:])

            if not any(stored_after(j) for j, i in enumerate(window) if i.startswith("LDG.E.64")):
                assert fn == "retouch_probe", (fn, window)
                continue
            assert len(loads) == 1, (fn, window)
            dst = _reg(loads[0].split(None, 1)[1])
            at = window.index(loads[0])
            stores = [i for i in window[at + 1:] if i.startswith("STS") and i.endswith(f", {dst}")]
            assert stores, (fn, window)
            addr = re.search(r"\[(R\d+)\.64\]", loads[0]).group(1)
            timed += 1
        assert timed >= 1, fn
        # every chase load's address register is some load's destination register (a chain)
        dests = {_reg(i.split(None, 1)[1]) for i in _loads(ins)}
        assert addr in dests, fn


def test_streaming_kernels_fit_2048_threads_per_sm(cubins):
    usage = {**cubins["bandwidth"].resource_usage(), **cubins["loaded"].resource_usage()}
    for fn in ("bw_read", "bw_write", "bw_copy", "saturator_read", "saturator_copy"):
        assert usage[fn]["registers"] <= 32, (fn, usage[fn])  # 65536 registers / 2048 threads


def test_streaming_kernels_use_16_byte_accesses(sass):
    assert any(i.startswith("LDG.E.128") for i in sass["bw_read"])
    assert any(i.startswith("STG.E.128") for i in sass["bw_write"])
    copy = sass["bw_copy"]
    assert any(i.startswith("LDG.E.128") for i in copy) and any(i.startswith("STG.E.128") for i in copy)
    for fn in ("bw_read", "bw_write", "bw_copy", "saturator_read", "saturator_copy"):
        assert any(i.startswith("NANOSLEEP") for i in sass[fn]), fn


def test_loaded_kernels_read_their_sm_and_the_global_timer(sass):
    for fn in ("loaded_chase", "retouch_probe", "saturator_read", "saturator_copy"):
        assert any("SR_VIRTUALSMID" in i for i in sass[fn]), fn
        assert any("SR_GLOBALTIMER" in i for i in sass[fn]), fn
    for fn in ("bw_read", "bw_write", "bw_copy"):  # the active-SM filter and the chunk claims
        assert any("SR_VIRTUALSMID" in i for i in sass[fn]) and any(i.startswith("ATOMG") for i in sass[fn]), fn


def test_chases_stamp_a_clock_window(sass):
    """Issue 10.9: every chase reads %globaltimer and clock64 around its timed accesses, so the host
    converts that chase's cycles with the clock it ran at (--clocks none lets the clock move)."""
    for fn in ("chase_cg", "chase_ca", "loaded_chase", "retouch_probe", "sm_clock_rate"):
        assert any("SR_GLOBALTIMER" in i for i in sass[fn]), fn
        assert sum("SR_CLOCKLO" in i for i in sass[fn]) >= 2, fn


def test_retouch_probe_and_fill_kernel_resources(cubins):
    """Issue 10.8/10.12: the re-touch probe (two stamp arrays: 16392 B of static shared memory,
    plan.probe_static_smem) and the random fill compile without spills."""
    usage = {**cubins["loaded"].resource_usage(), **cubins["bandwidth"].resource_usage()}
    for fn in ("retouch_probe", "fill_random"):
        assert usage[fn]["spill_stores"] == 0 and usage[fn]["stack"] == 0, usage[fn]
    smem = re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes smem", cubins["loaded"].log, re.S)
    from sitsprof.probes.plan import probe_static_smem

    assert dict(smem).get("retouch_probe", str(probe_static_smem())) == str(probe_static_smem())
