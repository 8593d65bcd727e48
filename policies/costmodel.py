"""Turn a replay into time: per-request time to first token (TTFT) and per-run percentiles.

Per referenced block (``block_tokens`` tokens at block position j of its request):

hit       read the block's KV bytes from HBM: ``kv_bytes / hbm_read_bw + hbm_latency``
recompute prefill the block again: ``(2 * active_params * tokens + attention) / (peak * achieved
          fraction) + kv_bytes / hbm_write_bw``, where attention over the prefix before it
          costs ``4 * layers * q_heads * attn_dim * tokens * (start + tokens / 2)`` FLOPs
reload    copy the block back from host memory: ``kv_bytes / host_to_device_bw + hbm_latency``

A serving engine reuses only a request's cached *prefix*: with ``miss="recompute"`` every
block after the first miss is recomputed even when it is resident; with ``miss="reload"``
resident blocks past a miss are still read from HBM and missing ones reloaded from host.
Compute and bandwidth terms are divided by the preset's tensor-parallel degree. TTFT adds
one decode step (weights plus the context's KV read once). Requests are served one at a
time: no queueing is modelled, so the percentiles are those of service time, not of
latency under load.

GPU figures come from a calibration file (reports/calibration.py); none given means the
shipped ``hopper-published`` reference, which is not a measurement.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..reports.calibration import CalibrationError, latency_ns, load_calibration
from .errors import PolicyEngineError
from .models import DEFAULT_MODEL, ModelPreset, get_model
from .trace import Trace

MISS_MODES = ("recompute", "reload")


class CostModelError(PolicyEngineError):
    """A cost model that cannot be built from what it was given."""


@dataclass(frozen=True)
class GpuFigures:
    hbm_read_bps: float
    hbm_write_bps: float
    host_bps: float
    hbm_latency_s: float
    flops: float  # achieved dense BF16 FLOP/s for prefill
    calibration: str

    @classmethod
    def from_calibration(cls, calibration: dict | str | None = None) -> "GpuFigures":
        cal = calibration if isinstance(calibration, dict) else load_calibration(calibration)
        bw = cal["bandwidth"]
        compute = cal.get("compute")
        if compute is None:
            raise CalibrationError("compute", "the cost model needs compute.bf16_dense_tflops to price recompute")
        read = bw["hbm_read_gbs"] * 1e9
        return cls(
            hbm_read_bps=read,
            hbm_write_bps=bw.get("hbm_write_gbs", bw["hbm_read_gbs"]) * 1e9,
            host_bps=bw.get("host_to_device_gbs", 0.0) * 1e9,
            hbm_latency_s=latency_ns(cal, "hbm", "p50") * 1e-9,
            flops=compute["bf16_dense_tflops"] * 1e12 * compute["achieved_fraction"],
            calibration=cal["name"],
        )


class CostModel:
    """Prices every block reference of a trace as a hit or a miss, then sums per request."""

    def __init__(self, calibration=None, model: str | ModelPreset = DEFAULT_MODEL, miss: str = "recompute",
                 stack_models: bool = True):
        if miss not in MISS_MODES:
            raise CostModelError(f"miss cost {miss!r} unknown; choose from {', '.join(MISS_MODES)}")
        self.gpu = GpuFigures.from_calibration(calibration)
        if miss == "reload" and self.gpu.host_bps <= 0:
            raise CalibrationError("bandwidth.host_to_device_gbs", "is needed to price host reloads (miss='reload')")
        self.model = model if isinstance(model, ModelPreset) else get_model(model)
        self.miss = miss
        self.stack_models = stack_models

    # -- per reference --------------------------------------------------------------
    def _presets(self, trace: Trace) -> tuple[list[ModelPreset], np.ndarray]:
        """Presets in use and, per reference, its index (tenants named after a preset use it)."""
        presets = [self.model]
        code_to_index = np.zeros(len(trace.tenant_names) + 1, dtype=np.int64)
        if self.stack_models:
            from .models import PRESETS

            for code, name in enumerate(trace.tenant_names):
                if name in PRESETS:
                    if PRESETS[name] not in presets:
                        presets.append(PRESETS[name])
                    code_to_index[code] = presets.index(PRESETS[name])
        tenant = np.asarray(trace.tenant, dtype=np.int64)
        index = np.where(tenant >= 0, code_to_index[np.clip(tenant, 0, None)], 0) if len(tenant) else tenant
        return presets, index

    def block_costs(self, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
        """(hit seconds, miss seconds) for every reference."""
        presets, index = self._presets(trace)
        g = self.gpu
        tokens = np.asarray(trace.tokens, dtype=np.float64)
        start = np.asarray(trace.position, dtype=np.float64) * trace.block_tokens

        def per_preset(attr):
            return np.array([attr(p) for p in presets], dtype=np.float64)[index]

        kv = per_preset(lambda p: p.kv_bytes_per_token) * tokens
        tp = per_preset(lambda p: p.tensor_parallel)
        hit = kv / (g.hbm_read_bps * tp) + g.hbm_latency_s
        if self.miss == "reload":
            miss = kv / (g.host_bps * tp) + g.hbm_latency_s
        else:
            linear = 2e9 * per_preset(lambda p: p.params_active_b) * tokens
            attn = 4.0 * per_preset(lambda p: p.layers * p.q_heads * p.attn_dim) * tokens * (start + tokens / 2)
            miss = (linear + attn) / (g.flops * tp) + kv / (g.hbm_write_bps * tp)
        return hit, miss

    def decode_step(self, trace: Trace) -> np.ndarray:
        """Seconds of one decode step per request (weights + the request's KV, read once)."""
        presets, index = self._presets(trace)
        offsets = trace.request_offsets
        first = offsets[:-1]
        if not len(first):
            return np.zeros(0)
        ridx = index[first]
        weights = np.array([p.params_total_b * 1e9 * p.dtype_bytes for p in presets])[ridx]
        kvpt = np.array([p.kv_bytes_per_token for p in presets], dtype=np.float64)
        tp = np.array([p.tensor_parallel for p in presets], dtype=np.float64)[ridx]
        tokens = np.add.reduceat(np.asarray(trace.tokens, dtype=np.float64), first)
        return (weights + kvpt[ridx] * tokens) / (self.gpu.hbm_read_bps * tp)

    # -- per request ----------------------------------------------------------------
    def request_ttft(self, trace: Trace, hit: np.ndarray, costs=None) -> np.ndarray:
        """Seconds to first token of every request, given per-reference hit flags."""
        hit_s, miss_s = costs if costs is not None else self.block_costs(trace)
        return ttft_from_costs(trace.request_offsets, np.asarray(trace.request), hit, hit_s, miss_s,
                               self.miss == "recompute") + self.decode_step(trace)

    def summarize(self, trace: Trace, hit: np.ndarray) -> dict:
        """Run figures: TTFT P50/P95/P99/mean (ms) and tokens per second."""
        ttft = self.request_ttft(trace, hit)
        out = latency_summary(ttft)
        input_tokens = float(np.sum(trace.tokens))
        total = float(ttft.sum())
        out["prefill_tokens_per_s"] = input_tokens / total if total > 0 else 0.0
        outputs = trace.request_output_tokens
        if outputs is not None and len(outputs) == len(ttft) and np.all(outputs >= 0):
            step = self.decode_step(trace)
            busy = total + float(np.sum(outputs * step))
            out["tokens_per_s"] = float(np.sum(outputs)) / busy if busy > 0 else 0.0
        else:
            out["tokens_per_s"] = None
        out.update(calibration=self.gpu.calibration, model=self.model.name, miss=self.miss)
        return out


def ttft_from_costs(offsets, request, hit, hit_s, miss_s, prefix_only: bool) -> np.ndarray:
    """Sum per-reference costs per request; with `prefix_only`, a hit counts only in the leading run."""
    n = len(hit)
    if n == 0:
        return np.zeros(max(len(offsets) - 1, 0))
    hit = np.asarray(hit, dtype=bool)
    if prefix_only:
        misses = np.cumsum(~hit)
        first = offsets[:-1]
        before = misses[first] - (~hit[first])  # misses before each request's first reference
        served = hit & (misses == before[request])
    else:
        served = hit
    cost = np.where(served, hit_s, miss_s)
    csum = np.concatenate(([0.0], np.cumsum(cost)))
    return csum[offsets[1:]] - csum[offsets[:-1]]


def latency_summary(seconds: np.ndarray) -> dict:
    """P50/P95/P99/mean of per-request seconds, in milliseconds."""
    if len(seconds) == 0:
        return {"requests": 0, "ttft_p50_ms": 0.0, "ttft_p95_ms": 0.0, "ttft_p99_ms": 0.0, "ttft_mean_ms": 0.0}
    p50, p95, p99 = np.percentile(seconds, [50, 95, 99]) * 1e3
    return {"requests": int(len(seconds)), "ttft_p50_ms": float(p50), "ttft_p95_ms": float(p95),
            "ttft_p99_ms": float(p99), "ttft_mean_ms": float(np.mean(seconds) * 1e3)}
