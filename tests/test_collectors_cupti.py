"""The CUPTI PM sampler and session against tests/fake_cupti.py, a stand-in that follows
cupti-python 13.3/13.4's real API (high-level Collector, low-level `cupti.cupti` params and
decode stop reasons, profiler_host single-pass sets) over a simulated GPU whose clock can run
fast. The real thing runs only in the GPU test (tests/test_pmu_gpu.py)."""
from __future__ import annotations

import sys
import threading
import time

import fake_cupti
import numpy as np
import pytest
from fake_cupti import RECORD_BYTES, Result

from sitsprof.cli.main import main
from sitsprof.collectors import cupti_sampler
from sitsprof.collectors.rundir import open_run
from sitsprof.pmu import cupti_pm
from sitsprof.pmu.catalog import DEFAULT_CUPTI_METRICS
from sitsprof.pmu.errors import NoGpuError, UnsupportedError


@pytest.fixture
def cupti(monkeypatch):
    """Install the stand-in: `cupti(**FakeGpu options)` returns its simulated GPU."""
    monkeypatch.setattr(cupti_pm, "availability", lambda *a: (True, "stand-in"))

    def install(**options):
        return fake_cupti.install(monkeypatch, **options)

    return install


def _run(sampler, seconds, drain_every=None):
    sampler.start()
    chunks = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(drain_every or seconds)
        if drain_every:
            chunks.append(sampler.drain())
    sampler.stop()
    chunks.append(sampler.drain())
    return [c for c in chunks if c]


def _joined(chunks):
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


# -- issue 10 item 3: overflow and the stop reason come from the decode parameters -------------

@pytest.mark.parametrize("image", [None, 500])
def test_overflow_at_10us_is_read_from_the_decode_params_and_every_lost_sample_counted(cupti, image):
    """Issue 10.3: at 10 us with a hardware buffer of 2,000 records (20 ms) and a host decoding
    every 100 ms, CUPTI keeps the oldest records and sets `overflow` in the decode params. The
    sampler reads it (the high-level Collector.decode never does), names the stop reason, and
    accounts for every sample the GPU produced: kept + missing = produced, none silently gone.
    With a 500-sample image the buffer takes several decodes (COUNTER_DATA_FULL) to empty and the
    gap shows decodes after the flag: still every missing sample is put down to the overflow."""
    gpu = cupti(speed=1.0)
    sampler = cupti_sampler.CuptiPmSampler(0, interval_ns=10_000, decode_every_s=0.1,
                                           hardware_buffer_size=2_000 * RECORD_BYTES)
    if image:
        sampler.session.max_samples = image
    rows = _joined(_run(sampler, 0.5))
    stats = sampler.stats()
    last_k = (int(rows["gpu_start_ns"][-1]) - gpu.t0_gpu) // 10_000
    between = sum(count for first, count in gpu.lost_runs if first < last_k)  # the loss after the last
    assert gpu.lost >= between > 0  # decoded sample is on no timeline; all the rest must be counted
    # as many overflow events as decodes the stand-in flagged (how many decodes the host manages
    # in 0.5 s depends on the machine's load; every one of them that saw the flag counts)
    assert stats["overflow"] is True and stats["overflow_events"] == gpu.overflow_flags >= 1
    assert stats["overflow_samples"] == stats["dropped"] == between
    assert stats["samples"] == len(rows["gpu_start_ns"]) == gpu.produced_total - gpu.lost
    assert stats["last_stop_reason"] == "END_OF_RECORDS" and stats["stop_reasons"]["END_OF_RECORDS"] >= 1
    assert stats["last_error"] is None and not gpu.enabled  # disabled at the end


def test_a_decode_cupti_cannot_continue_is_counted_and_sampling_restarts(cupti):
    """Issue 10.3: where CUPTI answers a decode with ERROR_OUT_OF_MEMORY (hardware buffer
    overflowed; cupti-python's decode turns it into MemoryError) the sampler records the stop
    reason, counts the overflow and the samples missing across it, and starts sampling again."""
    gpu = cupti(speed=1.0, overflow_mode="error")
    sampler = cupti_sampler.CuptiPmSampler(0, interval_ns=10_000, decode_every_s=0.005,
                                           hardware_buffer_size=2_000 * RECORD_BYTES)
    sampler.start()
    time.sleep(0.05)  # decoded in time: the timeline has a first sample
    sampler.decode_every_s = 0.1  # now the 20 ms buffer overflows before each decode
    time.sleep(0.35)
    sampler.decode_every_s = 0.002
    time.sleep(0.1)
    sampler.stop()
    rows = sampler.drain()
    stats = sampler.stats()
    assert stats["restarts"] >= 1 and gpu.starts == stats["restarts"] + 1
    assert stats["stop_reasons"]["ERROR_OUT_OF_MEMORY"] - stats["restarts"] in (0, 1)  # none after stop()
    assert stats["overflow"] and stats["overflow_samples"] > 0 and stats["dropped"] >= stats["overflow_samples"]
    assert np.all(np.diff(rows["gpu_start_ns"]) > 0)  # the GPU clock runs on across the restart
    assert stats["samples"] == len(rows["gpu_start_ns"]) > 2_000 and stats["last_error"] is None


# -- issue 10 item 4: one image, bulk evaluation, bounded host memory -------------------------

def test_one_image_is_reused_and_a_full_image_is_decoded_again(cupti):
    """Issue 10.4: every decode goes into the same counter-data image, re-initialised each time
    (the old code allocated a fresh 20,000-sample image per decode and kept it until drain); when
    more records wait than the image holds CUPTI says COUNTER_DATA_FULL and the sampler decodes
    again in the same period, so nothing is left behind. Values and timestamps line up."""
    gpu = cupti(speed=1.0)
    sampler = cupti_sampler.CuptiPmSampler(0, interval_ns=100_000, decode_every_s=0.05)
    sampler.session.max_samples = 300  # smaller than one 50 ms period (500 samples)
    rows = _joined(_run(sampler, 0.6))
    stats = sampler.stats()
    assert len(gpu.decode_images) == 1 and gpu.images_initialized == gpu.decodes == stats["decodes"]
    assert stats["stop_reasons"]["COUNTER_DATA_FULL"] >= 5
    assert stats["dropped"] == 0 and stats["overflow"] is False
    assert len(rows["gpu_start_ns"]) == gpu.produced_total == stats["expected_samples"]
    k = (rows["gpu_start_ns"] - rows["gpu_start_ns"][0]) // 100_000
    for j, name in enumerate(DEFAULT_CUPTI_METRICS):
        assert rows[name].dtype == np.float64
        np.testing.assert_array_equal(rows[name], gpu.value(k, j))
    np.testing.assert_array_equal(rows["gpu_end_ns"] - rows["gpu_start_ns"], 100_000)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_host_memory_stays_flat_and_the_sampler_keeps_up_at_the_default_interval(cupti):
    """Issue 10.4: at the default interval, 16 s of GPU time (the stand-in's clock runs 4x fast,
    so 4 s here), drained once per GPU second as the recorder does: the backlog stays under a
    second, pending samples stay what a drain period holds, resident memory does
    not grow with recording time, and drained samples = expected within 1%. (RSS, not
    tracemalloc: tracing every allocation slows the decode loop 7x, and then it cannot keep up.
    bench/bench_cupti_sampler.py runs the full 60 s at real speed.)"""
    speed, gpu_seconds = 4.0, 16.0
    gpu = cupti(speed=speed)
    assert cupti_pm.DEFAULT_INTERVAL_NS >= 100_000
    per_gpu_second = 1e9 / cupti_pm.DEFAULT_INTERVAL_NS
    sampler = cupti_sampler.CuptiPmSampler(0)
    drained, rss, backlog = 0, [], []
    sampler.start()
    t_end = time.monotonic() + gpu_seconds / speed
    while time.monotonic() < t_end:
        time.sleep(1.0 / speed)
        drained += len(sampler.drain().get("gpu_start_ns", ()))
        rss.append(_rss_bytes())
        backlog.append(gpu.produced_total - sampler.samples)
    sampler.stop()
    drained += len(sampler.drain().get("gpu_start_ns", ()))
    stats = sampler.stats()
    assert drained == stats["drained"] == stats["samples"] == gpu.produced_total
    assert drained >= 0.95 * gpu_seconds * per_gpu_second  # the clock ran fast, as asked
    assert drained == pytest.approx(stats["expected_samples"], rel=0.01) and stats["dropped"] == 0
    assert max(backlog[2:]) < per_gpu_second * speed, backlog  # kept up: under a second behind, not growing
    assert stats["pending_peak_samples"] < 10 * per_gpu_second  # what one drain took, not the recording
    third = len(rss) // 3
    assert max(rss[-third:]) < max(rss[1:third]) + 4 * 1024 * 1024, rss  # flat over the recording
    assert len(gpu.decode_images) == 1


def test_pending_samples_are_capped_and_what_the_cap_refuses_is_counted(cupti):
    """Issue 10.4: host memory is bounded even when nobody drains: pending samples stop at the
    cap, and the samples refused are counted (host_dropped), not silently lost."""
    gpu = cupti(speed=1.0)
    sampler = cupti_sampler.CuptiPmSampler(0, interval_ns=100_000, max_pending_bytes=2_000 * 56)
    sampler.start()
    time.sleep(0.5)
    sampler.stop()
    stats = sampler.stats()
    rows = sampler.drain()
    assert sampler.max_pending_samples == 2_000 == len(rows["gpu_start_ns"]) == stats["pending_peak_samples"]
    assert stats["host_dropped"] == gpu.produced_total - 2_000 > 0
    assert stats["dropped"] == 0


# -- issue 10 item 5: metrics checked at configure time, one-line errors, disable on failure ---

def test_metric_the_chip_lacks_is_named_and_pm_sampling_disabled_again(cupti):
    """Issue 10.5: a metric the chip does not have is named in one line before configure, and
    PM sampling is disabled again."""
    gpu = cupti()
    session = cupti_pm.PmSamplingSession(0, ["lts__t_sectors_lookup_hit.sum", "l2_bogus__x.sum"])
    with pytest.raises(UnsupportedError) as info:
        session.start()
    message = str(info.value)
    assert "GH100 has no metric l2_bogus__x.sum" in message and "\n" not in message
    assert "lts__t_sectors_lookup_hit.sum" not in message
    assert "pm_sampling_set_config" not in gpu.calls and "pm_sampling_disable" in gpu.calls
    assert not gpu.enabled and gpu.profiler_initialized == 0 and session.collector is None


def test_metrics_that_need_two_passes_are_named_against_the_single_pass_sets(cupti):
    """Issue 10.5: metrics from two single-pass sets do not fit PM sampling's one pass: the
    error names the ones outside the set that holds the most of them, and the set."""
    gpu = cupti()
    metrics = ["lts__t_sectors_lookup_hit.sum", "dram__bytes_read.sum", "sm__inst_executed.sum"]
    with pytest.raises(UnsupportedError) as info:
        cupti_pm.PmSamplingSession(0, metrics).start()
    message = str(info.value)
    assert "sm__inst_executed.sum not available in one pass" in message and "'L2_DRAM'" in message
    assert "2 passes" in message and "\n" not in message
    assert "get_single_pass_sets" in gpu.calls and "pm_sampling_set_config" not in gpu.calls
    assert not gpu.enabled


def test_a_pass_count_cupti_cannot_give_leaves_the_decision_to_configure(cupti):
    """Issue 10.5: the pre-check never blocks a configuration CUPTI would take: where
    get_num_of_passes fails, sampling starts (configure still refuses a multi-pass list)."""
    gpu = cupti(fail={"get_num_of_passes": Result.ERROR_UNKNOWN})
    session = cupti_pm.PmSamplingSession(0)
    session.start()
    try:
        assert gpu.started and "get_num_of_passes" in gpu.calls
    finally:
        session.stop()
        session.close()
    assert not gpu.enabled


def test_single_pass_sets_are_listed_per_device(cupti):
    """Issue 10.5 (and the device check's listing): the chip's single-pass sets with their metrics."""
    cupti()
    listing = cupti_pm.pm_sampling_sets(0)
    assert listing["chip"] == "GH100" and listing["sets"] == fake_cupti.DEFAULT_SETS


@pytest.mark.parametrize("call, status, error, words", [
    ("pm_sampling_start", Result.ERROR_UNKNOWN, UnsupportedError, "could not start on CUDA device 0: ERROR_UNKNOWN"),
    ("pm_sampling_start", Result.ERROR_INVALID_OPERATION, UnsupportedError, "already started"),
    ("pm_sampling_set_config", Result.ERROR_NOT_SUPPORTED, UnsupportedError, "rejected the configuration"),
    ("profiler_host_initialize", Result.ERROR_UNKNOWN, UnsupportedError, "ERROR_UNKNOWN"),
])
def test_a_failed_start_is_one_line_and_disables_pm_sampling(cupti, call, status, error, words):
    """Issue 10.5: cuptiError / RuntimeError / ValueError after enable become one line, and
    PM sampling is disabled again (the old code left it enabled on a cuptiError from start)."""
    gpu = cupti(fail={call: status})
    sampler = cupti_sampler.CuptiPmSampler(0)
    with pytest.raises(error) as info:
        sampler.start()
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not gpu.enabled and "pm_sampling_disable" in gpu.calls and gpu.profiler_initialized == 0
    assert not gpu.host_objects  # the evaluator is freed too
    assert sampler.session.collector is None


@pytest.mark.parametrize("call, status, error, words", [
    ("pm_sampling_enable", Result.ERROR_INSUFFICIENT_PRIVILEGES, UnsupportedError, "needs profiling permission"),
    ("pm_sampling_enable", Result.ERROR_INVALID_OPERATION, UnsupportedError, "already enabled"),
    ("pm_sampling_enable", Result.ERROR_OUT_OF_MEMORY, UnsupportedError, "could not be enabled"),
    ("pm_sampling_enable", Result.ERROR_UNKNOWN, UnsupportedError, "ERROR_UNKNOWN"),
    ("profiler_initialize", Result.ERROR_NOT_INITIALIZED, UnsupportedError, "nvperf"),
])
def test_enable_errors_are_one_line(cupti, call, status, error, words):
    """Issue 10.5: what Collector.enable raises (PermissionError, RuntimeError, MemoryError,
    cuptiError) is one line naming the problem; nothing stays enabled."""
    gpu = cupti(fail={call: status})
    with pytest.raises(error) as info:
        cupti_pm.PmSamplingSession(0).start()
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not gpu.enabled


def test_a_device_cuda_does_not_have_is_no_gpu(cupti):
    """Issue 10.5: Collector.enable's ValueError (bad device index) is NoGpuError, one line."""
    cupti(devices=1)
    with pytest.raises(NoGpuError, match="no CUDA device 3"):
        cupti_pm.PmSamplingSession(3).start()


@pytest.mark.parametrize("version", ["13.3.0", "13.4.0"])
def test_both_binding_spellings_work(cupti, version):
    """cupti-python 13.4 renamed the params classes (PmSamplingDecodeDataParams); 13.3 has only
    PmSampling_DecodeData_Params. The session decodes with either."""
    gpu = cupti(version=version)
    assert hasattr(sys.modules["cupti.cupti"], "PmSamplingDecodeDataParams") == (version == "13.4.0")
    rows = _joined(_run(cupti_sampler.CuptiPmSampler(0), 0.3))
    assert len(rows["gpu_start_ns"]) == gpu.produced_total > 1_000


def test_record_with_cupti_writes_the_table_and_its_stats(fake_gpu, cupti, tmp_path, capsys):
    """`sitsprof record --cupti` keeps working: numpy columns land in the run's cupti_pm table,
    the stats in meta.json carry the overflow count and stop reason."""
    cupti()
    code = main(["record", "--out", str(tmp_path), "--name", "c", "--no-gpm", "--cupti", "--duration", "0.5s"])
    out = capsys.readouterr().out
    assert code == 0 and "cupti_pm:" in out
    run = open_run(tmp_path / "c")
    table = run.read_table("cupti_pm", "sampler")
    stats = run.meta["samplers"]["cupti_pm"]
    assert len(table) == stats["samples"] > 1_000 and stats["interval_ns"] == cupti_pm.DEFAULT_INTERVAL_NS
    assert stats["overflow_samples"] == 0 and stats["last_stop_reason"] == "END_OF_RECORDS"
    assert set(table.columns) == {"gpu_start_ns", "gpu_end_ns", *DEFAULT_CUPTI_METRICS}


def test_record_with_cupti_failing_to_start_is_one_line_exit_2(fake_gpu, cupti, tmp_path, capsys):
    """Issue 10.5: a CUPTI start failure reaches the user as one line and exit status 2."""
    gpu = cupti(fail={"pm_sampling_start": Result.ERROR_UNKNOWN})
    code = main(["record", "--out", str(tmp_path), "--name", "d", "--no-gpm", "--cupti", "--duration", "0.2s"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "ERROR_UNKNOWN" in err
    assert not gpu.enabled


def test_stop_joins_while_decoding(cupti):
    cupti(speed=4.0)
    sampler = cupti_sampler.CuptiPmSampler(0).start()
    time.sleep(0.2)
    t = threading.Thread(target=sampler.stop)
    t.start()
    t.join(5)
    assert not t.is_alive() and sampler.stats()["last_error"] is None


def test_unavailable_cupti_says_why(monkeypatch):
    monkeypatch.setattr(cupti_pm, "availability", lambda *a: (False, "cupti-python is not installed"))
    with pytest.raises(UnsupportedError, match="cupti-python is not installed"):
        cupti_sampler.CuptiPmSampler(0).start()


def test_availability_checks_version_and_driver(monkeypatch):
    import importlib.metadata as md

    monkeypatch.setattr(md, "version", lambda name: "13.2.0")
    assert "too old" in cupti_pm.availability()[1]
    monkeypatch.setattr(md, "version", lambda name: "13.4.0")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    ok, reason = cupti_pm.availability(12080)
    assert not ok and "CUDA 12.8" in reason
    assert cupti_pm.availability(13000)[0]
