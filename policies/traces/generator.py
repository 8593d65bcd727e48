"""Seeded workload generator for the three-stack mixed benchmark.

Model
-----
Three model stacks share one KV-cache block pool; each is a `StackSpec`:

==============  ========  =======  =========  ==========  ========  =====  =======  =======
stack           context   prompts  prompt     first user  follow-up output max_new  sessions
                (tokens)  (count)  (tokens)   (median)    (median)  (med.) (tokens) (per s)
==============  ========  =======  =========  ==========  ========  =====  =======  =======
qwen2-72b       131,072   4        1500-4000  12,000      300       400    1024     0.25
deepseek-v2     131,072   6        800-2500   1,500       600       600    2048     0.80
phi-3-mini      4,096     3        200-600    150         120       120    256      3.00
==============  ========  =======  =========  ==========  ========  =====  =======  =======

* Sessions of each stack start as a Poisson process (`session_rate` per second) over
  `duration_s`; each picks one of the stack's system prompts with probability proportional
  to 1/(rank+1) (a few prompts dominate, as in production), and has a geometric number of
  turns (mean `mean_turns`: 3 / 5 / 2).
* User messages and outputs are log-normal (median as in the table; sigma `user_sigma`
  .8 / .9 / .7 and `output_sigma` .6 / .7 / .6), outputs clipped to [1, max_new_tokens].
* Turn t+1 arrives after turn t's decode time (`output / decode_tps`, 25 / 40 / 120 tok/s)
  plus an exponential think time (`think_s`: 60 / 30 / 10 s). Its prompt is the whole conversation so far:
  system prompt + every earlier user message and output + the new user message. A session
  ends when the next prompt plus `max_new_tokens` would pass the context window, or when
  its next turn would arrive after `duration_s`.
* `scale` multiplies every session rate (more concurrent sessions, the same shape).
* Priority classes (high/normal/low) are drawn per request with per-stack weights:
  qwen2-72b .2/.5/.3, deepseek-v2 .3/.6/.1, phi-3-mini .7/.3/0.

Blocks are named the way Mooncake's `hash_ids` are: a block of `block_tokens` (512) tokens
gets an id that names it together with its whole prefix. So the full blocks of a system
prompt are shared by every session using that prompt, a session's earlier full blocks are
shared by its later turns, and the block that straddles a boundary (a partial last block,
or the one where the system prompt ends and the user text starts) is new each time, as its
content differs. Ids are numbered 0, 1, 2, ... in order of first appearance.

Each stack draws from its own child of `np.random.SeedSequence(seed)`, so a seed fixes the
whole workload and changing one stack's parameters leaves the others' requests alone. With
the defaults (`duration_s=1800`, seed 0) the trace has 18,266 requests, 194,574 block
references and 63,056 distinct blocks (an infinite cache hits .676 of references), small
enough for every policy at several capacities in seconds; it is generated in about 0.6 s.

Prompt text (`generate_requests(prompts=True)`; `policy generate --as requests` writes it as
`prompt`): each system prompt of a stack is a persona of that stack (qwen2-72b: contract,
financial-report, paper and manual readers; deepseek-v2: Python, Rust, SQL, contest maths,
calculus, shell; phi-3-mini: shop support, travel, cooking) written out as a few sentences,
shared by every session that uses it; each turn adds a user message built from templates
and the persona's topics. `prompt` is the system prompt and the turn's user message: a short
stand-in for the conversation whose length is `input_tokens`, enough to tell the personas
apart by embedding. The text draws from its own generator (a grandchild of the stack's seed
sequence), so the blocks, times and lengths are the same with and without it.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sitsprof.common.atomic import atomic_write

from ..errors import TraceFormatError
from .ids import dense_ids, trace_from_requests
from .trace import DEFAULT_BLOCK_TOKENS, Trace

PRIORITY_CLASSES: tuple[str, ...] = ("high", "normal", "low")


@dataclass(frozen=True)
class StackSpec:
    """One model stack's traffic model (see the module docstring for what each field does)."""

    name: str
    context_tokens: int
    system_prompts: int
    system_prompt_tokens: tuple[int, int]  # uniform range the prompts' lengths are drawn from
    first_user_median: float
    followup_user_median: float
    user_sigma: float
    output_median: float
    output_sigma: float
    max_new_tokens: int
    session_rate: float  # sessions per second (Poisson)
    mean_turns: float
    think_s: float
    decode_tps: float  # tokens per second one request decodes at
    priority_weights: tuple[float, float, float]


DEFAULT_STACKS: tuple[StackSpec, ...] = (
    StackSpec(
        name="qwen2-72b", context_tokens=131_072, system_prompts=4, system_prompt_tokens=(1500, 4000),
        first_user_median=12_000, followup_user_median=300, user_sigma=0.8,
        output_median=400, output_sigma=0.6, max_new_tokens=1024,
        session_rate=0.25, mean_turns=3.0, think_s=60.0, decode_tps=25.0,
        priority_weights=(0.2, 0.5, 0.3),
    ),
    StackSpec(
        name="deepseek-v2", context_tokens=131_072, system_prompts=6, system_prompt_tokens=(800, 2500),
        first_user_median=1_500, followup_user_median=600, user_sigma=0.9,
        output_median=600, output_sigma=0.7, max_new_tokens=2048,
        session_rate=0.80, mean_turns=5.0, think_s=30.0, decode_tps=40.0,
        priority_weights=(0.3, 0.6, 0.1),
    ),
    StackSpec(
        name="phi-3-mini", context_tokens=4_096, system_prompts=3, system_prompt_tokens=(200, 600),
        first_user_median=150, followup_user_median=120, user_sigma=0.7,
        output_median=120, output_sigma=0.6, max_new_tokens=256,
        session_rate=3.00, mean_turns=2.0, think_s=10.0, decode_tps=120.0,
        priority_weights=(0.7, 0.3, 0.0),
    ),
)

STACK_NAMES: tuple[str, ...] = tuple(s.name for s in DEFAULT_STACKS)


@dataclass(frozen=True)
class Request:
    """One generated request: the request JSONL fields (traces/requests.py) plus what a replay needs."""

    request_id: str
    model_stack: str
    arrival_ms: int
    input_tokens: int
    max_new_tokens: int
    output_tokens: int
    priority_class: str
    session: str
    turn: int
    hash_ids: tuple[int, ...]
    prompt: str | None = None  # system prompt + this turn's user message (generate_requests(prompts=True))

    def design_record(self, extras: bool = True) -> dict:
        """The request JSONL format (traces/requests.py); `extras` adds arrival, session, turn, hash ids and the
        prompt text (when generated)."""
        record = {
            "request_id": self.request_id,
            "model_stack": self.model_stack,
            "input_tokens": self.input_tokens,
            "max_new_tokens": self.max_new_tokens,
            "priority_class": self.priority_class,
        }
        if extras:
            record.update(
                arrival_ms=self.arrival_ms, output_tokens=self.output_tokens,
                session=self.session, turn=self.turn, hash_ids=list(self.hash_ids),
            )
            if self.prompt is not None:
                record["prompt"] = self.prompt
        return record

    def mooncake_record(self) -> dict:
        return {
            "timestamp": self.arrival_ms,
            "input_length": self.input_tokens,
            "output_length": self.output_tokens,
            "hash_ids": list(self.hash_ids),
        }


def _lognormal(rng: np.random.Generator, median: float, sigma: float) -> int:
    return max(1, int(round(median * float(np.exp(sigma * rng.standard_normal())))))


def _stack_requests(spec: StackSpec, rng: np.random.Generator, duration_s: float, block_tokens: int, next_key):
    """Requests of one stack as tuples, with provisional block keys from `next_key`."""
    lo, hi = spec.system_prompt_tokens
    prompt_len = rng.integers(lo, hi + 1, size=spec.system_prompts)
    prompt_blocks = [[next_key() for _ in range(int(n) // block_tokens)] for n in prompt_len]
    prompt_cdf = np.cumsum(1.0 / np.arange(1, spec.system_prompts + 1))
    prompt_cdf /= prompt_cdf[-1]
    priority_cdf = np.cumsum(spec.priority_weights) / sum(spec.priority_weights)

    n_sessions = int(rng.poisson(spec.session_rate * duration_s))
    starts = np.sort(rng.uniform(0.0, duration_s, size=n_sessions))
    out = []
    for s, start in enumerate(starts):
        variant = min(int(np.searchsorted(prompt_cdf, rng.random(), side="right")), spec.system_prompts - 1)
        turns = int(rng.geometric(1.0 / spec.mean_turns))
        committed = list(prompt_blocks[variant])  # ids of the session's full blocks so far
        length = int(prompt_len[variant])  # tokens of conversation so far
        arrival = float(start)
        for turn in range(turns):
            median = spec.first_user_median if turn == 0 else spec.followup_user_median
            length += _lognormal(rng, median, spec.user_sigma)
            output = min(spec.max_new_tokens, _lognormal(rng, spec.output_median, spec.output_sigma))
            priority = PRIORITY_CLASSES[min(int(np.searchsorted(priority_cdf, rng.random(), side="right")), 2)]
            if length + spec.max_new_tokens > spec.context_tokens or arrival >= duration_s:
                break
            n_blocks = -(-length // block_tokens)
            ids = committed[:n_blocks] + [next_key() for _ in range(n_blocks - len(committed))]
            committed = ids[: length // block_tokens]  # the partial last block is not reused
            out.append((int(arrival * 1000), spec.name, length, output, priority, s, turn, ids, variant))
            length += output
            arrival += output / spec.decode_tps + float(rng.exponential(spec.think_s))
    return out


# Prompt text: (persona, what it reads or does, its topics) per stack; a stack with more system
# prompts than personas (or one not listed) numbers generic ones.
PERSONAS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "qwen2-72b": (
        ("a contract reviewer for a corporate legal team", "the agreement pasted below",
         ("termination clause", "indemnity", "liability cap", "governing law", "confidentiality obligations",
          "payment terms", "force majeure", "assignment rights")),
        ("a financial analyst who reads annual reports", "the annual report and its notes",
         ("revenue growth", "operating margin", "free cash flow", "full-year guidance", "segment results",
          "debt covenants", "share buyback", "goodwill impairment")),
        ("a research assistant who summarises scientific papers", "the paper in the context",
         ("methodology", "sample size", "ablation study", "baseline comparison", "stated limitations",
          "related work", "training dataset", "evaluation metric")),
        ("a support engineer answering from equipment manuals", "the service manual provided",
         ("installation steps", "error code E42", "maintenance schedule", "safety warnings", "wiring diagram",
          "firmware update", "sensor calibration", "warranty conditions")),
    ),
    "deepseek-v2": (
        ("a senior Python developer", "the user's Python code",
         ("list comprehensions", "decorators", "asyncio tasks", "pandas dataframes", "pytest fixtures",
          "type hints", "generators", "virtual environments")),
        ("a Rust systems programmer", "the user's Rust crate",
         ("the borrow checker", "lifetimes", "trait objects", "the tokio runtime", "cargo features",
          "unsafe blocks", "error handling with Result", "iterator adaptors")),
        ("a database engineer who tunes SQL", "the schema and queries shown",
         ("inner joins", "composite indexes", "window functions", "the query plan", "transaction isolation",
          "schema migrations", "foreign keys", "deadlocks")),
        ("a coach for mathematics olympiad problems", "the problem statement",
         ("modular arithmetic", "combinatorics", "an inequality", "polynomial roots", "a geometry proof",
          "a recurrence relation", "conditional probability", "prime factorisation")),
        ("a calculus and linear algebra tutor", "the exercise sheet",
         ("eigenvalues", "a definite integral", "the gradient", "a matrix inverse", "a Taylor series",
          "a differential equation", "the determinant", "a limit")),
        ("a DevOps engineer who writes shell and deployment scripts", "the user's configuration files",
         ("a Docker image", "a Kubernetes pod", "a bash script", "the CI pipeline", "an nginx config",
          "a systemd unit", "log rotation", "SSH keys")),
    ),
    "phi-3-mini": (
        ("a friendly customer-support agent for an online shop", "the customer's order history",
         ("a refund", "my order status", "a shipping delay", "a damaged item", "a password reset",
          "a discount code", "a return label", "an invoice")),
        ("a travel assistant", "the traveller's itinerary",
         ("a flight change", "a hotel booking", "a visa", "the baggage allowance", "train times",
          "a car rental", "travel insurance", "a day plan")),
        ("a home-cooking helper", "the ingredients the user lists",
         ("a vegetarian recipe", "the baking time", "an egg substitute", "a weekly meal plan", "a spice mix",
          "a slow-cooker stew", "a pasta sauce", "leftover rice")),
    ),
}
_FIRST_TURN = ("Can you explain {t} in {w}?", "I need help with {t}; here is what I have so far.",
               "Please summarise what {w} says about {t}.", "What is wrong with {t} here? It keeps failing.",
               "How should I handle {t}? Give me a short example.", "Walk me through {t} step by step.")
_FOLLOW_UP = ("Thanks. And what about {t}?", "Can you go deeper on {t}?", "That did not work; look at {t} again.",
              "Now compare that with {t}.", "Give me a shorter answer about {t}.")


def system_prompt_text(stack: str, variant: int) -> str:
    """The text of system prompt `variant` of `stack` (the same for every session using it)."""
    personas = PERSONAS.get(stack, ())
    if variant < len(personas):
        who, what, topics = personas[variant]
    else:
        who, what = f"assistant number {variant + 1} of {stack}", "the documents provided"
        topics = tuple(f"subject {variant + 1}.{k}" for k in range(8))
    return (f"You are {who}. Work from {what}. Typical questions concern {', '.join(topics[:-1])} or "
            f"{topics[-1]}; quote {what} where it helps.")


def _stack_prompts(spec: StackSpec, rows, seed_seq: np.random.SeedSequence) -> list[str]:
    """One prompt text per request tuple of one stack (system prompt + this turn's user message)."""
    rng = np.random.default_rng(seed_seq)
    systems = [system_prompt_text(spec.name, v) for v in range(spec.system_prompts)]
    personas = PERSONAS.get(spec.name, ())
    texts = []
    for row in rows:
        turn, variant = row[6], row[8]
        topics = personas[variant][2] if variant < len(personas) else (f"subject {variant + 1}",)
        what = personas[variant][1] if variant < len(personas) else "the documents"
        templates = _FIRST_TURN if turn == 0 else _FOLLOW_UP
        message = templates[int(rng.integers(len(templates)))].format(t=topics[int(rng.integers(len(topics)))],
                                                                       w=what)
        texts.append(f"{systems[variant]}\n\nUser: {message}")
    return texts


def generate_requests(
    seed: int = 0,
    duration_s: float = 1800.0,
    stacks: tuple[StackSpec, ...] = DEFAULT_STACKS,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    scale: float = 1.0,
    prompts: bool = False,
) -> list[Request]:
    """The requests of the mixed workload in arrival order (ties keep stack order).

    `scale` multiplies every stack's session rate (more concurrent sessions, same shape);
    `prompts` adds each request's prompt text (module docstring), from its own seeded draws.
    """
    if duration_s <= 0 or scale <= 0:
        raise ValueError("duration_s and scale must be positive")
    counter = iter(range(2**62))
    next_key = counter.__next__
    children = np.random.SeedSequence(seed).spawn(len(stacks))
    rows = []
    for spec, child in zip(stacks, children):
        if scale != 1.0:
            spec = dataclasses.replace(spec, session_rate=spec.session_rate * scale)
        stack_rows = _stack_requests(spec, np.random.default_rng(child), duration_s, block_tokens, next_key)
        texts = _stack_prompts(spec, stack_rows, child.spawn(1)[0]) if prompts else [None] * len(stack_rows)
        rows.extend(row + (text,) for row, text in zip(stack_rows, texts))
    if not rows:
        return []
    order = np.argsort(np.array([r[0] for r in rows], dtype=np.int64), kind="stable")
    rows = [rows[i] for i in order]
    # Renumber blocks 0, 1, 2, ... in order of first appearance, as Mooncake's hash ids are.
    keys = np.fromiter((k for r in rows for k in r[7]), dtype=np.int64)
    dense, _ = dense_ids(keys)
    dense_list = dense.tolist()
    requests = []
    pos = 0
    for i, (arrival_ms, stack, length, output, priority, session, turn, ids, _, prompt) in enumerate(rows):
        n = len(ids)
        requests.append(
            Request(
                request_id=f"req-{i:06d}", model_stack=stack, arrival_ms=arrival_ms,
                input_tokens=length, max_new_tokens=next(s.max_new_tokens for s in stacks if s.name == stack),
                output_tokens=output, priority_class=priority, session=f"{stack}/{session}", turn=turn,
                hash_ids=tuple(dense_list[pos : pos + n]), prompt=prompt,
            )
        )
        pos += n
    return requests


def requests_to_trace(
    requests: list[Request],
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    stack_names: tuple[str, ...] = STACK_NAMES,
    source: str = "generator",
) -> Trace:
    """The block-reference Trace of generated requests; tenant = model stack."""
    if not requests:
        raise TraceFormatError(
            source, "empty trace: the generator produced no requests", fix="raise duration_s or scale"
        )
    names = list(stack_names)
    for r in requests:
        if r.model_stack not in names:
            names.append(r.model_stack)
    code = {name: i for i, name in enumerate(names)}
    trace = trace_from_requests(
        [r.hash_ids for r in requests],
        [r.arrival_ms for r in requests],
        [r.input_tokens for r in requests],
        [r.output_tokens for r in requests],
        tenant=[code[r.model_stack] for r in requests],
        tenant_names=tuple(names),
        source=source,
        block_tokens=block_tokens,
    )
    if any(r.prompt is not None for r in requests):
        trace = dataclasses.replace(trace, request_texts=tuple(r.prompt for r in requests))
    return trace


def generate_workload(seed: int = 0, duration_s: float = 1800.0, scale: float = 1.0, **kwargs) -> Trace:
    """The three-stack mixed workload as a Trace (tenant = model stack)."""
    requests = generate_requests(seed=seed, duration_s=duration_s, scale=scale, **kwargs)
    block_tokens = kwargs.get("block_tokens", DEFAULT_BLOCK_TOKENS)
    source = f"generator(seed={seed}, duration_s={duration_s:g}, scale={scale:g})"
    return requests_to_trace(requests, block_tokens=block_tokens, source=source)


def _write_jsonl(path, records) -> Path:
    """Write one JSON object a line, atomically: an interrupted write leaves the old file whole
    (a shorter trace that still reads would otherwise pass for the real one)."""
    path = Path(path)

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, separators=(", ", ": ")))
                handle.write("\n")

    atomic_write(path, write)
    return path


def write_requests_jsonl(requests: list[Request], path, extras: bool = True) -> Path:
    """Write the request JSONL format (traces/requests.py), one JSON object a line."""
    return _write_jsonl(path, (r.design_record(extras=extras) for r in requests))


def write_mooncake_jsonl(requests: list[Request], path) -> Path:
    """Write Mooncake-style JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids`)."""
    return _write_jsonl(path, (r.mooncake_record() for r in requests))


__all__ = [
    "DEFAULT_STACKS",
    "PRIORITY_CLASSES",
    "STACK_NAMES",
    "Request",
    "StackSpec",
    "generate_requests",
    "generate_workload",
    "system_prompt_text",
    "requests_to_trace",
    "write_mooncake_jsonl",
    "write_requests_jsonl",
]
