"""Issue 20 item 1: sitsprof makes CUPTI's nvperf libraries loadable itself (pmu/nvperf.py).

cupti-python's docs (Getting Started, "Profiling Library Configuration") say CUPTI dlopens
libnvperf_host.so and libnvperf_target.so by bare name, and that their folder (the wheel's
nvidia/cu13/lib) must be on LD_LIBRARY_PATH. These tests lay out an installed
nvidia-cuda-cupti wheel (a dist-info whose RECORD lists nvidia/cu13/lib/libnvperf_*.so, the
two libraries real ELF objects with the real SONAMEs, built here with the C compiler) in a
folder that is NOT on LD_LIBRARY_PATH, and run the cupti-python stand-in with
`dlopen_nvperf`: its profiler_initialize dlopens both libraries by bare name, as CUPTI does,
and fails with ERROR_NOT_INITIALIZED (enable(): "CUPTI could not load the nvperf* libraries")
unless the library it gets exports the test's marker symbol. A machine whose ldconfig knows a
toolkit's nvperf (this one does) therefore cannot make the test pass by accident.

Each case runs in a fresh interpreter: a library once loaded stays loaded for the process.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MARKER = "sitsprof_standin_nvperf"
TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the stand-in nvperf")


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory) -> Path:
    """A site folder holding an 'installed' nvidia-cuda-cupti 13.4.92 with stand-in nvperf libraries."""
    site = tmp_path_factory.mktemp("site")
    lib = site / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    source = site / "marker.c"
    source.write_text(f"int {MARKER}(void) {{ return 1; }}\n")
    record = []
    for name in ("libnvperf_host.so", "libnvperf_target.so"):
        subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(lib / name), str(source)],
                       check=True)
        record.append(f"nvidia/cu13/lib/{name},,")
    (lib / "libcupti.so.13").write_bytes(b"")  # listed, never loaded: the stand-in is the binding
    record.append("nvidia/cu13/lib/libcupti.so.13,,")
    info = site / "nvidia_cuda_cupti-13.4.92.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cuda-cupti\nVersion: 13.4.92\n")
    (info / "RECORD").write_text("\n".join(record + ["nvidia_cuda_cupti-13.4.92.dist-info/RECORD,,"]) + "\n")
    return site


def _run(site: Path, body: str, pathfinder: str | None = None) -> dict:
    """Run `body` in a fresh interpreter with the stand-in cupti installed; it prints one JSON line.
    cuda.pathfinder (how cupti-python finds libcupti) is replaced by a stub that finds libcupti
    at `pathfinder`, or none (so an installed one does not decide what the test sees)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(TESTS), env.get("PYTHONPATH", "")])
    script = textwrap.dedent(f"""
        import json, os, sys, types
        finder = types.ModuleType("cuda.pathfinder")
        def load_nvidia_dynamic_lib(name, where={pathfinder!r}):
            if name != "cupti" or where is None:
                raise RuntimeError("DynamicLibNotFoundError: " + name)
            return types.SimpleNamespace(abs_path=where)
        finder.load_nvidia_dynamic_lib = load_nvidia_dynamic_lib
        sys.modules["cuda.pathfinder"] = finder
        import fake_cupti
        from sitsprof.pmu import cupti_pm
        cupti_pm.availability = lambda *a: (True, "stand-in")
        gpu = fake_cupti.install(None, dlopen_nvperf={MARKER!r})
        def nvperf_maps():
            with open("/proc/self/maps") as f:
                return sorted({{line.split()[-1] for line in f if "libnvperf" in line}})
        """) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_the_preload_the_standin_cannot_find_nvperf(wheel_site):
    """The control: the stand-in's bare-name dlopen does not reach the wheel's folder by itself."""
    out = _run(wheel_site, """
        from cupti import pm_sampling
        try:
            pm_sampling.Collector(0).enable()
            print(json.dumps({"enabled": True}))
        except RuntimeError as exc:
            print(json.dumps({"enabled": False, "error": str(exc)}))
        """)
    assert out == {"enabled": False, "error": "CUPTI could not load the nvperf* libraries required for profiling."}


def test_session_preloads_the_wheels_nvperf_and_starts(wheel_site):
    """With LD_LIBRARY_PATH unset, PmSamplingSession.start() loads the wheel's nvperf (found through
    the dist-info RECORD) before enable(), and the stand-in's bare-name dlopen gets exactly it."""
    out = _run(wheel_site, """
        session = cupti_pm.PmSamplingSession(0, metrics=["dram__bytes_read.sum"])
        session.start()
        from sitsprof.pmu.nvperf import ensure_nvperf
        status = ensure_nvperf()
        session.stop(); session.close()
        print(json.dumps({"how": status.how, "folder": status.folder, "maps": nvperf_maps(),
                          "ld": os.environ.get("LD_LIBRARY_PATH")}))
        """)
    lib = str(wheel_site / "nvidia" / "cu13" / "lib")
    assert out["ld"] is None
    assert out["how"] == "nvidia-cuda-cupti wheel" and out["folder"] == lib
    assert out["maps"] == [f"{lib}/libnvperf_host.so", f"{lib}/libnvperf_target.so"]


def test_the_folder_of_the_libcupti_cupti_python_loads_comes_first(wheel_site, tmp_path):
    """cupti-python loads libcupti through cuda.pathfinder: nvperf is taken from beside that file
    (same CUPTI release), before the wheel's RECORD is even read."""
    other = wheel_site / "nvidia" / "cu13" / "lib"
    out = _run(tmp_path, """
        session = cupti_pm.PmSamplingSession(0, metrics=["dram__bytes_read.sum"])
        session.start()
        from sitsprof.pmu.nvperf import ensure_nvperf
        status = ensure_nvperf()
        session.stop(); session.close()
        print(json.dumps({"how": status.how, "folder": status.folder, "maps": nvperf_maps()}))
        """, pathfinder=str(other / "libcupti.so.13"))
    assert out == {"how": "beside the loaded libcupti", "folder": str(other),
                   "maps": [f"{other}/libnvperf_host.so", f"{other}/libnvperf_target.so"]}


def test_pm_sampling_sets_preloads_too(wheel_site):
    """The device check's pm-sets step goes through pm_sampling_sets(): same preload."""
    out = _run(wheel_site, """
        listing = cupti_pm.pm_sampling_sets(0)
        print(json.dumps({"chip": listing["chip"], "sets": sorted(listing["sets"])}))
        """)
    assert out == {"chip": "GH100", "sets": ["L2_DRAM", "SM"]}


def test_not_found_names_where_it_looked_and_the_docs(tmp_path):
    """No wheel, nothing on the loader path with the marker: the one-line error says where it looked."""
    out = _run(tmp_path, """
        from sitsprof.pmu import nvperf
        from sitsprof.pmu.errors import UnsupportedError
        nvperf._wheel_folders = lambda: []
        nvperf._site_folders = lambda: []
        nvperf._load = lambda paths: (_ for _ in ()).throw(OSError("not here"))
        try:
            cupti_pm.PmSamplingSession(0, metrics=["dram__bytes_read.sum"]).start()
            print(json.dumps({"error": None}))
        except UnsupportedError as exc:
            print(json.dumps({"error": str(exc), "calls": gpu.calls}))
        """)
    assert out["error"].startswith("CUPTI PM sampling could not be enabled on CUDA device 0: CUPTI could not load")
    assert "libnvperf_host.so / libnvperf_target.so not found" in out["error"]
    assert "Profiling Library Configuration" in out["error"] and "\n" not in out["error"]
    assert "pm_sampling_enable" not in out["calls"]  # enable() stopped at profiler_initialize


def test_gpu_test_skips_with_the_reason_when_pm_sampling_cannot_start(monkeypatch):
    """tests/test_pmu_gpu.py's CUPTI test, run here against the stand-in with nvperf missing:
    a skip whose reason names the nvperf libraries, not a failure."""
    import fake_cupti
    import test_pmu_gpu

    from sitsprof.pmu import cupti_pm, nvperf

    monkeypatch.setattr(cupti_pm, "availability", lambda *a: (True, "stand-in"))
    monkeypatch.setattr(nvperf, "_STATUS", nvperf.NvperfStatus(False, None, "not found", ["nowhere"]))
    monkeypatch.setattr(nvperf, "ensure_nvperf", lambda **k: nvperf._STATUS)
    monkeypatch.setattr(cupti_pm, "ensure_nvperf", lambda **k: nvperf._STATUS)
    fake_cupti.install(monkeypatch, fail={"profiler_initialize": fake_cupti.Result.ERROR_NOT_INITIALIZED})
    with pytest.raises(pytest.skip.Exception, match="cannot start: .*nvperf"):
        test_pmu_gpu.test_cupti_pm_sampling_keeps_up_at_the_default_interval_and_reports_10us_overflow()
