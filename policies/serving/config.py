"""`ReplayConfig`: what one `policy replay` simulates, built once at the CLI's edge and passed down.

The engine settings used to cross four signatures as a dozen keyword arguments each
(cli/policy.py -> summary.replay_document / routing.routed_document -> routing.run_routed ->
scheduler.run_replay); vLLM keeps its own in one `SchedulerConfig`. Here they are one frozen
object: the engine and its scheduler limits (vLLM's `max_num_batched_tokens`,
`max_num_seqs`, `block_size`, the admission rule `scheduler_reserve_full_isl`), the model (a
`ModelSpec`: preset or config.json, with its precision and tensor-parallel size), the
calibration, the pool (`capacities`, parsed per trace), the arrivals (`rate_scale`), the
instances and routing, the seed, and the options of -p sits.

`run_replay` and the document builders still take the same keyword arguments (tests and
scripts call them so): `ReplayConfig.of(config, **settings)` folds them into one config.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from ..errors import ServingReplayError

__all__ = ["ENGINES", "ReplayConfig"]

ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class ReplayConfig:
    engine: str = "vllm"
    block_tokens: int = 16  # tokens per KV block (vLLM --block-size)
    max_num_batched_tokens: int = 8192  # token budget per scheduler step
    max_num_seqs: int = 256  # most requests running at once
    #: admission rule: vLLM 0.33's default admits a waiting request only when its whole prompt
    #: (minus hits) fits (`scheduler_reserve_full_isl`); False is the older first-chunk rule
    reserve_full_isl: bool = True
    serial: bool | None = None  # one request at a time (None: when rate_scale <= scheduler.SERIAL_RATE_SCALE)
    #: SGLang's batches: a step with prefill work runs it alone and decodes wait (enable_mixed_chunk
    #: off, its default); False: vLLM's mixed batch of decodes and prefill chunks
    prefill_first: bool = False
    #: SGLang's admission (--engine sglang): PrefillAdder reserves the running requests' future
    #: outputs (x new_token_ratio) and decodes are retracted when the pool runs out
    #: (sglang_admission.py); False: vLLM's rule (reserve_full_isl)
    sglang_admission: bool = False
    #: the requests are ignore_eos (benchmarks with a fixed output length): SGLang then reserves
    #: their whole remaining output, ratio 1 (schedule_policy.py:785-794)
    sglang_ignore_eos: bool = False
    model: object = None  # a ModelSpec (policies/cost/models.py), a preset name or config path; None: default
    calibration: object = None  # a calibration path or dict; None: the shipped reference
    #: the pool per replica: blocks (100k), % of the trace's distinct blocks, or KV memory per GPU
    #: (60GiB); None: what the GPU holds after the weights and vLLM's reserve (memory.py)
    capacities: str | None = None
    gpu: str | None = None  # h100 | h200 (None: the calibration's device)
    gpu_memory_utilization: float = 0.9  # vLLM's default
    allow_oversized_pool: bool = False  # a -c larger than the GPU holds: replayed with a warning, not refused
    rate_scale: float = 1.0  # multiplies the arrival rate
    concurrency: int | None = None  # a closed loop of N clients (workload.py) instead of the trace's arrivals
    seed: int = 0  # the step model's sampled delays (instance i of a routed replay: seed + i)
    policies: str = "lru"
    instances: int | None = None  # None: one engine, no router
    routing: str | None = None
    router: object = None  # routing.RouterSettings (None: its defaults)
    # -p sits only: the controller's window, the threshold engine, SitsConfig fields
    window_s: float | None = None
    threshold: bool = False
    sits: dict | None = field(default=None, compare=False)
    #: per-op step profile (latency.py `profile`; policy validate --step-model profiled); None: the roofline
    step_profile: dict | None = field(default=None, compare=False)

    @classmethod
    def of(cls, config: ReplayConfig | None = None, **settings) -> ReplayConfig:
        """`config` with `settings` (keyword arguments named as the fields) laid over it; an
        unknown name is a TypeError, as a misspelt keyword argument is."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise TypeError(f"unknown replay setting(s): {', '.join(unknown)}")
        base = config if config is not None else cls()
        return replace(base, **settings) if settings else base

    def spec(self):
        """The model as a ModelSpec (the default preset when none was given)."""
        from ..cost.models import DEFAULT_MODEL, get_model

        return get_model(self.model if self.model is not None else DEFAULT_MODEL)

    def checked(self) -> ReplayConfig:
        """Itself, or a ServingReplayError naming the first impossible setting."""
        if self.engine not in ENGINES:
            raise ServingReplayError(f"unknown engine {self.engine!r}; choose vllm or sglang")
        if not (isinstance(self.rate_scale, (int, float)) and np.isfinite(self.rate_scale) and self.rate_scale > 0):
            raise ServingReplayError(f"--rate-scale {self.rate_scale}: must be a positive number "
                                     "(2 = twice the arrival rate)")
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ServingReplayError("--max-num-batched-tokens and --max-num-seqs must be at least 1")
        if self.sglang_admission and self.engine != "sglang":
            raise ServingReplayError("SGLang's admission (--sglang-admission) is the radix engine's; "
                                     "add --engine sglang")
        if self.block_tokens < 1:
            raise ServingReplayError(f"--block-tokens {self.block_tokens}: must be at least 1 (16 is vLLM's default)")
        return self

    def engine_fields(self) -> dict:
        """The `engine` object of the policy-results document (docs/policy-results.md)."""
        spec = self.spec()
        return {"engine": self.engine, "block_tokens": int(self.block_tokens), "rate_scale": float(self.rate_scale),
                "max_num_batched_tokens": int(self.max_num_batched_tokens), "max_num_seqs": int(self.max_num_seqs),
                "model": spec.name, "tensor_parallel": int(spec.tensor_parallel), "dtype": spec.dtype,
                "kv_dtype": spec.kv_dtype}

    def to_dict(self) -> dict:
        d = asdict(replace(self, model=None, router=None, calibration=None))
        d["model"] = self.spec().name
        d["calibration"] = self.calibration if isinstance(self.calibration, str) else None
        return d
