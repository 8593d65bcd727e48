"""Placeholder step-time model with the interface of S3's `latency.py` (docs: SERVING.md).

Used only until `policies/serving/latency.py` exists (scheduler.py imports that one first).
A step lasts max(compute, memory) + a fixed overhead: compute = prefill FLOPs (2 x active
parameters per token, plus attention 4 x layers x heads x head dim per token pair) over the
calibrated FLOP rate; memory = weights once + the KV of every running request's context + the
KV written, over the calibrated HBM read bandwidth; both divided by the tensor-parallel degree.
No loaded latency, no re-fetch term (those are latency.py's).
"""
from __future__ import annotations

import numpy as np
from numba import njit

STEP_OVERHEAD_S = 2e-3  # scheduler + launch overhead per step (placeholder figure)


class StepCostModel:
    def __init__(self, params: tuple, description: str):
        self.params = params
        self.description = description

    @classmethod
    def from_calibration(cls, calibration=None, model_preset=None, block_tokens: int = 16, seed: int = 0):
        from ..cost.costmodel import GpuFigures
        from ..cost.models import DEFAULT_MODEL, ModelPreset, get_model

        g = GpuFigures.from_calibration(calibration)
        p = model_preset if isinstance(model_preset, ModelPreset) else get_model(model_preset or DEFAULT_MODEL)
        tp = float(p.tensor_parallel)
        params = (
            np.float64(2e9 * p.params_active_b / (g.flops * tp)),  # s per prefill token (linear layers)
            np.float64(4.0 * p.layers * p.q_heads * p.attn_dim / (g.flops * tp)),  # s per attention pair
            np.float64(p.params_total_b * 1e9 * p.dtype_bytes / (g.hbm_read_bps * tp)),  # weights once
            np.float64(p.kv_bytes_per_token / (g.hbm_read_bps * tp)),  # s per context token read
            np.float64(p.kv_bytes_per_token / (g.hbm_write_bps * tp)),  # s per token written
            np.float64(STEP_OVERHEAD_S),
        )
        return cls(params, f"placeholder step model ({g.calibration}, {p.name})")


@njit(cache=True)
def step_seconds(params, prefill_tokens, attn_token_pairs, context_tokens, kv_write_tokens, n_running,
                 table_blocks, rng_state, terms):
    per_tok, per_pair, weights, per_ctx, per_write, overhead = params
    compute = prefill_tokens * per_tok + attn_token_pairs * per_pair
    memory = weights + context_tokens * per_ctx + kv_write_tokens * per_write
    terms[0] += compute
    terms[1] += memory
    terms[3] += overhead
    return max(compute, memory) + overhead
