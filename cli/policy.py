"""`sitsprof policy ...`: replay KV-cache block traces through the replacement policies.

Wiring only: traces come from `sitsprof.policies.traces`, replays from
`sitsprof.policies.sweep`, capacities and result files from `sitsprof.policies.engine`,
curves from `sitsprof.policies.engine.mrc`. Heavy imports (numba via the policy kernels,
pandas) happen inside the commands.
"""
from __future__ import annotations

import click

from .console import (
    TRACE_READ_KEY,
    cost_table,
    cost_title,
    emit_json,
    load_trace,
    results_table,
    run_with_progress,
    stdout_console,
)
from .options import DURATION, calibration_option
from .plan import make_plan_cmd
from .replaying import add_verdict, check_early, followed, replay_extras, show
from .sits import claims_cmd, serve_metrics
from .validate import validate_cmd

__all__ = [
    "COMMANDS",
    "DEFAULT_CAPACITIES",
    "FORMAT_CHOICES",
    "MODEL_DTYPES",
    "MRC_HELP",
    "REPLAY_POLICIES",
    "generate_cmd",
    "list_cmd",
    "mrc_cmd",
    "plan_cmd",
    "policy_group",
    "replay_cmd",
    "replay_config",
    "simulate_cmd",
]

FORMAT_CHOICES = ["mooncake", "bailian", "oracle", "csv", "requests"]
DEFAULT_CAPACITIES = "1%,10%,50%"


def _trace_options(func):
    # How to read the trace beyond its format: kept in ctx.meta for console.load_trace (TRACE_READ_KEY).
    def keep(ctx, param, value):
        ctx.meta.setdefault(TRACE_READ_KEY, {})[param.name] = value
        return value

    func = click.option(
        "--block-tokens", type=click.IntRange(min=1), default=None, expose_value=False, callback=keep,
        help="Tokens per block of the trace (default: the format's, 16 for Bailian, 512 otherwise); "
             "weights the token hit ratio and the cost model.",
    )(func)
    func = click.option(
        "--time-unit", type=click.Choice(["s", "ms", "us", "ns"]), default=None, expose_value=False, callback=keep,
        help="Unit of the trace's timestamps (default: the format's: Mooncake ms, Bailian s; "
             "CSV guessed, with a warning).",
    )(func)
    func = click.option(
        "--sort-by-time", is_flag=True, expose_value=False, callback=keep,
        help="Replay requests in arrival order (stable) when the trace's timestamps are out of order "
             "(default: file order, with a warning giving the count).",
    )(func)
    func = click.option(
        "--skip-bad-lines", is_flag=True,
        help="Drop malformed lines (reported on stderr and in --json) instead of stopping at the first.",
    )(func)
    func = click.option(
        "--format", "fmt", type=click.Choice(FORMAT_CHOICES, case_sensitive=False), default=None,
        help="Trace format (default: from the file name, else from its content).",
    )(func)
    return func


@click.command("simulate")
@click.argument("trace_path", metavar="TRACE")
@click.option("--policy", "-p", "policy_text", default="all", show_default=True,
              help="Comma-separated policy names, or 'all' (see `sitsprof policy list`).")
@click.option("--capacity", "-c", "capacity_text", default=DEFAULT_CAPACITIES, show_default=True,
              help="Comma-separated capacities in blocks (1000, 10k) or % of the trace's distinct blocks.")
@_trace_options
@click.option("--calibration", default=None, callback=calibration_option,
              help="Calibration JSON for the cost model (default: the shipped hopper-published reference, "
                   "not measured).")
@click.option("--model", "model_name", default=None, help="Model preset for the cost model (default qwen2-72b).")
@click.option("--miss", "miss_mode", type=click.Choice(["recompute", "reload"]), default="recompute",
              show_default=True, help="Price a miss as prefill recompute or host reload.")
@click.option("--shard-key", type=click.Choice(["auto", "first-block", "tenant", "stack", "embedding"]), default=None,
              help="semantic-shard: group requests by first block, tenant, model stack or prompt embedding "
                   "(default auto: embedding when the trace carries prompt texts, else first block).")
@click.option("--embedder", default=None, metavar="SPEC",
              help="semantic-shard, shard key embedding: hashed (built in, default), sentence-transformers:PATH "
                   "or model2vec:PATH (a local model folder; nothing is downloaded).")
@click.option("--ttl", "ttl", default=None, type=DURATION,
              help="semantic-shard: entry TTL in trace time, e.g. 180s (default), 5m.")
@click.option("--window", "window", default=None, type=DURATION,
              help="sits, semantic-shard: decision window in trace time, e.g. 60s (default).")
@click.option("--threshold", "threshold", is_flag=True, default=False,
              help="sits: serve LIRS until the dynamic threshold engine hot-switches to SITS.")
@click.option("--threshold-windows", type=click.IntRange(min=1), default=None,
              help="sits: consecutive breaching windows that fire the switch (default 3; implies --threshold).")
@click.option("--param", "-P", "param_items", multiple=True, metavar="NAME=VALUE",
              help="Any policy parameter by name, e.g. -P margin=0.001 -P hir_ratio=0.02 (repeatable); "
                   "a name no selected policy takes is an error that lists what they take.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one policy-results document (docs/policy-results.md) instead of a table.")
@click.option("--csv", "as_csv", is_flag=True,
              help="Print flat CSV rows instead of a table: hit ratios, ttft_p50/p95/p99/mean_ms, "
                   "tokens_per_s_one_stream (one request stream back to back: no batching, no queueing), CTCCI, "
                   "parameters; no event logs (--events).")
@click.option("--events", "events_path", default=None, type=click.Path(dir_okay=False, writable=True),
              help="Write the adaptive policies' event logs (SITS decisions, shard rebalances) to this file, "
                   "one JSON object a line with its policy and capacity.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes for the sweep's runs (default: every core, at most one per run, when "
                   "runs x references reach 20 million, else 1); the same results as one process.")
@click.option("--cluster", "cluster", default=None, metavar="ADDRESS",
              help="Run the sweep on a Dask distributed scheduler, e.g. tcp://10.0.0.5:8786 "
                   "(pip install 'sitsprof[cluster]'; docs/scale.md); the same results as one process.")
@click.option("--stream/--no-stream", "stream", default=None,
              help="oracleGeneral, Mooncake and Bailian traces: read the file in chunks, keeping each policy's "
                   "state between them, so memory follows the distinct blocks, not the trace's length "
                   "(docs/scale.md); the same hits. oracleGeneral: every policy (not sits's --threshold); "
                   "Mooncake and Bailian: all but belady, sits and semantic-shard. No cost model TTFT. "
                   "Default: streamed when the file is large (4M oracleGeneral records, ~20M JSONL references) "
                   "and nothing asked needs the whole trace; --no-stream holds it whatever its size.")
def simulate_cmd(trace_path, policy_text, capacity_text, fmt, skip_bad_lines, as_json, as_csv,
                 calibration=None, model_name=None, miss_mode="recompute", shard_key=None, ttl=None, window=None,
                 threshold=False, threshold_windows=None, param_items=(), embedder=None, events_path=None,
                 jobs=None, cluster=None, stream=None) -> None:
    """Replay TRACE (Mooncake JSONL, oracleGeneral, CSV or request JSONL) through each policy at each capacity."""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are alternatives; pick one")
    from sitsprof.common.jit import scope as jit_scope
    from sitsprof.policies.engine import jitmode

    # Kernels interpreted or compiled (SITSPROF_JIT, issue 14): decided before each kernel call,
    # the first time before numpy loads (jitmode.before_reading).
    from sitsprof.policies.registry import select_policies

    policies = select_policies(policy_text)
    click.get_current_context().with_resource(jit_scope())
    if not stream:
        jitmode.before_reading(trace_path, policies, capacity_text.split(","),
                               headroom=not (as_json or as_csv) and "belady" not in policies)
    from sitsprof.policies.engine.autostream import before_numpy

    before_numpy(trace_path, stream)
    from sitsprof.policies.engine.capacity import parse_capacities
    from sitsprof.policies.engine.params import bind, parse_assignments
    from sitsprof.policies.engine.results import document, event_records, result_rows, rows_to_csv, trace_summary
    from sitsprof.policies.registry import get_policy

    given = parse_assignments(param_items)
    for name, value in (("shard_key", shard_key), ("embedder", embedder), ("ttl_s", ttl), ("window_s", window),
                        ("threshold", True if threshold or threshold_windows else None),
                        ("threshold_windows", threshold_windows)):
        if value is not None:
            given[name] = value
    params = bind([get_policy(p) for p in policies], given)  # sweep's bind_params, without importing the sweep
    if stream is None:
        from .autostream import stream_on_its_own

        stream = stream_on_its_own(trace_path, fmt, policies, params, skip_bad_lines=skip_bad_lines,
                                   events=events_path is not None, jobs=jobs, cluster=cluster)
    if stream:
        from sitsprof.common.jit import allow_aot

        allow_aot()  # kernels built ahead of time (`sitsprof compile --aot`) spare numba's start-up
        _simulate_stream(trace_path, fmt, policy_text, policies, capacity_text, params, skip_bad_lines, as_json, as_csv,
                         cost={"calibration": calibration, "model": model_name, "miss": miss_mode})
        return
    from sitsprof.policies.sweep import run_policies

    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    capacities = parse_capacities(capacity_text, trace.n_blocks)
    jitmode.before_replay(len(trace.block), policies, capacities,
                          headroom=not (as_json or as_csv) and "belady" not in policies)
    results = run_with_progress(trace, policies, capacities, not (as_json or as_csv), simulate=run_policies,
                                calibration=calibration, model=model_name, miss=miss_mode, params=params,
                                jobs=jobs, cluster=cluster)
    summary = trace_summary(trace, trace_path, fmt)
    rows = result_rows(results, trace)
    if events_path is not None:
        from sitsprof.common import jsonout
        from sitsprof.common.atomic import atomic_write_text

        lines = [jsonout.dumps(e) for e in event_records(rows)]
        atomic_write_text(events_path, "".join(line + "\n" for line in lines))
        click.echo(f"sitsprof: wrote {len(lines):,} event(s) to {events_path}", err=True)
    if as_json:
        emit_json(document(rows, trace=summary))
        return
    if as_csv:
        click.echo(rows_to_csv(rows), nl=False)
        return
    title = (
        f"{trace_path}: {summary['references']:,} block references, {summary['requests']:,} requests, "
        f"{summary['distinct_blocks']:,} distinct blocks"
    )
    stdout_console().print(results_table(results, title=title))
    if "belady" not in policies:  # -p all lists it as its last row; otherwise one line under the table
        from sitsprof.policies.sweep import simulate

        best = [simulate(trace, "belady", c) for c in capacities]
        stdout_console().print("headroom (belady, offline optimal) block hit: "
                               + ", ".join(f"{r.block_hit_ratio:.4f} at {r.capacity:,}" for r in best))
    stdout_console().print(cost_table(results, title=cost_title(results)))


def _simulate_stream(trace_path, fmt, policy_text, policies, capacity_text, params, skip_bad_lines, as_json,
                     as_csv, cost=None) -> None:
    """`policy simulate --stream`: policies.engine.stream over an oracleGeneral file, or
    policies.engine.stream_lines over a Mooncake or Bailian file."""
    from sitsprof.policies.traces.detect import detect_format, reading_errors, trace_file

    shown, trace_path = trace_path, trace_file(trace_path)
    with reading_errors(trace_path):
        _stream_file(shown, trace_path, fmt or detect_format(trace_path), policy_text, policies, capacity_text,
                     params, skip_bad_lines, as_json, as_csv, cost)


def _stream_file(shown, trace_path, fmt, policy_text, policies, capacity_text, params, skip_bad_lines, as_json,
                 as_csv, cost) -> None:
    """`_simulate_stream` on the checked file `trace_path` (`shown`: as the user named it)."""
    from sitsprof.policies.engine.capacity import parse_capacities
    from sitsprof.policies.engine.results import document, result_rows, rows_to_csv
    from sitsprof.policies.engine.stream import StreamError, count_distinct, stream_simulate, streamable
    from sitsprof.policies.engine.stream_lines import (
        count_distinct_lines,
        line_formats,
        line_streamable,
        stream_simulate_lines,
    )
    from sitsprof.policies.registry import get_policy

    fmt = fmt.lower()
    lines = fmt in line_formats()
    if fmt != "oracle" and not lines:
        raise StreamError(f"--stream reads oracleGeneral, Mooncake and Bailian traces; {shown} is {fmt} "
                          "(replay it without --stream)")
    if skip_bad_lines and not lines:
        raise StreamError("--stream refuses the first bad oracleGeneral record rather than skipping it; drop "
                          "--skip-bad-lines or replay without --stream")
    ctx = click.get_current_context(silent=True)
    given = dict(ctx.meta.get(TRACE_READ_KEY, {})) if ctx is not None else {}
    if given.get("sort_by_time"):
        raise StreamError("--sort-by-time reorders the whole trace, which --stream never holds; drop one of them")
    reading = {k: given[k] for k in ("block_tokens", "time_unit") if given.get(k) is not None}
    if reading and not lines:
        raise StreamError(f"--stream reads an oracleGeneral file's records as they are; drop "
                          f"{' and '.join('--' + k.replace('_', '-') for k in reading)} or replay without --stream")
    modules = [get_policy(name) for name in policies]
    if policy_text.strip().lower() == "all":
        fits = line_streamable if lines else streamable
        left = [m.NAME for m in modules if not fits(m)]
        modules = [m for m in modules if fits(m)]
        if left:
            click.echo(f"sitsprof: --stream leaves out {', '.join(left)} (they need the whole trace)", err=True)
    n_blocks = 0
    if "%" in capacity_text:
        click.echo("sitsprof: --stream: counting distinct blocks for the % capacities (one extra pass)", err=True)
        n_blocks = (count_distinct_lines(trace_path, fmt, skip_bad_lines=skip_bad_lines, **reading) if lines
                    else count_distinct(trace_path))
    capacities = parse_capacities(capacity_text, n_blocks)
    if lines:
        results, summary = stream_simulate_lines(trace_path, fmt, modules, capacities, params=params,
                                                 skip_bad_lines=skip_bad_lines, **reading)
        if summary.get("skipped_lines"):
            click.echo(f"sitsprof: skipped {summary['skipped_lines']:,} bad line(s); first: "
                       f"{summary['skipped_examples'][0]}", err=True)
        if summary["out_of_order"]:
            from sitsprof.policies.traces.timing import out_of_order_message

            text = out_of_order_message(shown, summary["out_of_order"],
                                        "--sort-by-time needs the whole trace (replay without --stream for it)")
            click.echo(f"sitsprof: warning: {text}", err=True)
    else:
        results, summary = stream_simulate(trace_path, modules, capacities, params=params, cost=cost,
                                           note=lambda text: click.echo(f"sitsprof: --stream: {text}", err=True))
    rows = result_rows(results)
    if as_json:
        emit_json(document(rows, trace=summary))
        return
    if as_csv:
        click.echo(rows_to_csv(rows), nl=False)
        return
    title = (f"{shown} (streamed): {summary['references']:,} block references, "
             + (f"{summary['requests']:,} requests, " if lines else "")
             + f"{summary['distinct_blocks']:,} distinct blocks")
    stdout_console().print(results_table(results, title=title))
    stdout_console().print("cost model (TTFT) not computed when streaming: it needs every request at once; "
                           "replay without --stream for it")


MRC_HELP = """Hit-ratio curves of TRACE over many capacities: LRU exact in one pass (stack distances),
other policies (-p) by replaying at each point, or by SHARDS spatial sampling where that is
too slow, with Belady (offline optimal) beside them as the headroom.

\b
Capacities are log-spaced from 0.01% of the trace's distinct blocks (at least 1) to all of
them, so the knee below 10% shows; --spacing linear for even steps.
\b
--sample auto replays exactly while references x points stays under 50 million per policy,
else samples: the references of blocks whose hash falls under rate x 2^24, replayed at
capacity x rate, at least 1000 sampled blocks a point (smaller points sample more).
Measured mean absolute hit-ratio error against the exact curves, 20 log-spaced points
(bench/bench_mrc_sampling.py, docs/RESEARCH.md), at rates 0.1/0.01/0.001: Mooncake
conversation trace: LRU 0.0005-0.0007, ARC 0.0005-0.0008, S3-FIFO 0.0003, Belady 0.0001
(largest single point 0.004); generated three-stack workload, 4M references: LRU
0.0008-0.0014, ARC 0.0011-0.0015, S3-FIFO 0.0010-0.0015, Belady 0.0004-0.0005 (largest
0.009).
"""


@click.command("mrc", help=MRC_HELP)
@click.argument("trace_path", metavar="TRACE")
@click.option("--policy", "-p", "policy_text", default="lru", show_default=True,
              help="Comma-separated policies to draw curves for, or 'all'.")
@click.option("--points", "-n", default=20, show_default=True, type=click.IntRange(1, 100_000),
              help="Capacities on the curve (fewer when rounding to whole blocks merges some).")
@click.option("--spacing", type=click.Choice(["log", "linear"]), default="log", show_default=True,
              help="Capacity spacing up to the trace's distinct blocks.")
@click.option("--sample", "sample_text", default="auto", show_default=True, metavar="auto|exact|RATE",
              help="auto: exact unless too slow; exact: replay every point; RATE in (0, 1): SHARDS sampling.")
@click.option("--min-sampled-blocks", "min_blocks", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Smallest sampled cache; a point below it samples at a higher rate (100: faster, "
                   "mean error up to 0.0053 measured).")
@click.option("--no-headroom", is_flag=True, help="Leave out the Belady (offline optimal) curve.")
@_trace_options
@click.option("--json", "as_json", is_flag=True,
              help="Print a policy-results document with the curves (report --policy-results draws them).")
def mrc_cmd(trace_path, policy_text, points, spacing, sample_text, min_blocks, no_headroom, fmt, skip_bad_lines,
            as_json) -> None:
    from sitsprof.policies.engine.mrc import curve_capacities, policy_curve
    from sitsprof.policies.engine.results import document, trace_summary
    from sitsprof.policies.registry import get_policy, select_policies

    names = select_policies(policy_text)
    if not no_headroom and "belady" not in names:
        names.append("belady")
    try:
        sample = float(sample_text)
    except ValueError:
        sample = sample_text.strip().lower()
    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    caps = curve_capacities(trace.n_blocks, points, spacing)
    curves = [policy_curve(trace, get_policy(name), caps, sample=sample, min_blocks=min_blocks) for name in names]
    if as_json:
        emit_json(document([], trace=trace_summary(trace, trace_path, fmt), curves=[c.to_dict() for c in curves]))
        return
    from rich import box
    from rich.table import Table

    table = Table(title=f"Block hit ratio per capacity, {trace_path} ({len(trace):,} references, "
                        f"{trace.n_blocks:,} distinct blocks)", title_justify="left",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    for name in ("capacity", "% of blocks"):
        table.add_column(name, justify="right", no_wrap=True)
    for c in curves:
        # min_width keeps every figure whole when many policies share the width; headers wrap
        table.add_column("belady (headroom)" if c.policy == "belady" else c.policy, justify="right", min_width=6,
                         overflow="fold")
    for i, cap in enumerate(caps):
        table.add_row(f"{int(cap):,}", f"{100 * cap / max(trace.n_blocks, 1):.2f}",
                      *(f"{c.hit_ratios[i]:.4f}" for c in curves))
    stdout_console().print(table)
    how = {"stack-distance": "exact (one stack-distance pass)", "replay": "exact (a full replay per point)"}
    lines: dict[str, list[str]] = {}
    for c in curves:
        if c.method == "shards":
            note = (f"sampled (SHARDS), {c.rates.min():.3g} to {c.rates.max():.3g} of the blocks a point; "
                    "see --help for its measured error")
        else:
            note = how[c.method]
        lines.setdefault(note, []).append(c.policy)
    for note, policies in lines.items():
        stdout_console().print(f"{', '.join(policies)}: {note}")


@click.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: each policy's name, aliases, description and parameters (default and valid range).")
def list_cmd(as_json=False) -> None:
    """The replacement policies the engine knows (names: case, - and _ alike; e.g. prefix-lru, twoq)."""
    from sitsprof.policies.registry import policy_catalog

    catalog = policy_catalog()
    if as_json:
        emit_json(catalog)
        return
    from rich.table import Table

    table = Table("policy", "what it does", "parameters (-P name=value)")
    for entry in catalog:
        params = ", ".join(f"{p['name']}={p['default']}" for p in entry["parameters"])
        table.add_row(entry["name"], entry["description"], params or "-")
    stdout_console().print(table)


@click.command("generate")
@click.argument("out", type=click.Path(dir_okay=False, writable=True))
@click.option("--seed", default=0, show_default=True, help="Seed: the same seed gives the same workload.")
@click.option("--duration", "duration_s", default="30m", show_default=True, type=DURATION,
              help="Trace time of traffic (1800, 30m, 1h).")
@click.option("--scale", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Multiply every stack's session rate.")
@click.option("--as", "kind", type=click.Choice(["mooncake", "requests", "oracle", "csv"]), default="mooncake",
              show_default=True, help="Mooncake JSONL, request JSONL, oracleGeneral binary or CSV.")
def generate_cmd(out, seed, duration_s, scale, kind) -> None:
    """Write the seeded three-stack workload (qwen2-72b, deepseek-v2, phi-3-mini) to OUT."""
    from sitsprof.policies.traces import csvfile, generator, oracle

    requests = generator.generate_requests(seed=seed, duration_s=duration_s, scale=scale,
                                           prompts=kind == "requests")  # the request format carries prompt text
    trace = generator.requests_to_trace(requests)
    if kind == "mooncake":
        generator.write_mooncake_jsonl(requests, out)
    elif kind == "requests":
        generator.write_requests_jsonl(requests, out)
    elif kind == "oracle":
        oracle.write_oracle_general(out, trace.original_id, timestamps=trace.time.astype("int64"), sizes=trace.tokens)
    else:
        csvfile.write_csv(out, trace)
    click.echo(f"wrote {out}: {len(requests):,} requests, {len(trace):,} block references, "
               f"{trace.n_blocks:,} distinct blocks")


REPLAY_POLICIES = "lru"
MODEL_DTYPES = ["auto", "bf16", "fp16", "fp8"]  # policies/cost/models.py DTYPE_CHOICES


def _keep_trace_block_tokens(ctx, param, value):
    if value is not None:
        ctx.meta.setdefault(TRACE_READ_KEY, {})["block_tokens"] = value
    return value


@click.command("replay")
@click.argument("trace_path", metavar="[TRACE]", required=False)
@click.option("--engine", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True,
              help="Prefix-cache rules: vLLM v1's block pool, or SGLang's radix cache.")
@click.option("--policy", "-p", "policy_text", default=REPLAY_POLICIES, show_default=True,
              help="Comma-separated policies ordering the evictable blocks: lru (vLLM's own order), fifo, sieve, "
                   "s3fifo, arc, lirs, lfu, sits (adaptive, per --window), or all.")
@click.option("--capacity", "-c", "capacity_text", default=None,
              help="Comma-separated pool sizes per replica: KV blocks (100k), % of the re-blocked trace's distinct "
                   "blocks, or KV memory per GPU (60GiB). Default: what the GPU holds, as vLLM sizes it "
                   "(--gpu-memory-utilization x memory - weights - activation reserve; policies/serving/memory.py).")
@click.option("--gpu", type=click.Choice(["h100", "h200"], case_sensitive=False), default=None,
              help="The GPU whose memory sizes the pool: H100 80 GB or H200 141 GB (default: the calibration's "
                   "device).")
@click.option("--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True), default=0.9, show_default=True,
              help="vLLM's share of GPU memory for weights, activations and KV (its default 0.9).")
@click.option("--allow-oversized-pool", is_flag=True,
              help="Replay a -c pool larger than the GPU holds, with a warning, instead of refusing it.")
@click.option("--block-tokens", "kv_block_tokens", type=click.IntRange(min=1), default=16, show_default=True,
              help="Tokens per KV block of the replay; must divide the trace's block size (Mooncake: 512).")
@click.option("--trace-block-tokens", type=click.IntRange(min=1), default=None, expose_value=False,
              callback=_keep_trace_block_tokens, help="Tokens per block of the trace file (default: the format's).")
@click.option("--rate-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Multiply the arrival rate (2 = twice the requests per second). At 1e-3 or below requests are "
                   "served one at a time: same-time arrivals one after another.")
@click.option("--scheduler-reserve-full-isl/--no-scheduler-reserve-full-isl", "reserve_full_isl", default=True,
              show_default=True,
              help="vLLM 0.33's admission: a waiting request is admitted only when its whole prompt (minus its "
                   "prefix hits) fits; --no-... admits on its first chunk, as vLLM before 0.33.")
@click.option("--prefill-alone/--mixed-batches", "prefill_first", default=False, show_default=True,
              help="SGLang's batches (its enable_mixed_chunk off): a step with prefill work runs it alone and the "
                   "decodes wait; --mixed-batches is vLLM's (decodes and prefill chunks in one step).")
@click.option("--sglang-admission/--vllm-admission", "sglang_admission", default=False, show_default=True,
              help="--engine sglang: SGLang's PrefillAdder admission (the running requests' future outputs "
                   "reserved, x new_token_ratio unless --ignore-eos) and its retraction of decodes.")
@click.option("--ignore-eos", "sglang_ignore_eos", is_flag=True, default=False,
              help="With --sglang-admission: the requests are ignore_eos (fixed-length benchmarks); SGLang then "
                   "reserves their whole remaining output.")
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Token budget per scheduler step.")
@click.option("--max-num-seqs", type=click.IntRange(min=1), default=256, show_default=True,
              help="Most requests running at once.")
@click.option("--calibration", default=None, callback=calibration_option,
              help="Calibration JSON for the step time model (default: the shipped hopper-published reference, "
                   "not measured).")
@click.option("--model", "model_name", default=None, metavar="PRESET|PATH",
              help="Model for the step time model: a preset (qwen2-72b, the default; deepseek-v2; phi-3-mini) or "
                   "the path of a Hugging Face config.json (dense GQA, MLA, MoE; policies/cost/models.py).")
@click.option("--dtype", "weight_dtype", type=click.Choice(MODEL_DTYPES), default=None,
              help="Weight precision (default auto: the config's, fp8 when it is fp8-quantized, else bf16).")
@click.option("--kv-dtype", type=click.Choice(MODEL_DTYPES), default=None,
              help="KV-cache precision (default auto: the model's 16-bit dtype, as vLLM's kv_cache_dtype=auto).")
@click.option("--tp", type=click.IntRange(min=1), default=None,
              help="Tensor-parallel GPUs per replica (default: the preset's, 1 for a config.json).")
@click.option("--seed", default=0, show_default=True, help="Seed of the step model's sampled re-fetch delays.")
@click.option("--skip-bad-lines", is_flag=True, help="Drop malformed lines instead of stopping at the first.")
@click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES, case_sensitive=False), default=None,
              help="Trace format (default: from the file name, else from its content).")
@click.option("--json", "as_json", is_flag=True, help="Print one policy-results JSON document (its 'replay' list).")
@click.option("--window", "--window-s", "window_s", type=DURATION, default=None,
              help="sits: the controller's decision window in simulated time (10s, 1m; default 10s).")
@click.option("--threshold", "threshold", is_flag=True, default=False,
              help="sits: serve LIRS until the dynamic threshold engine, reading each window's P99 TTFT, "
                   "hot-switches to SITS.")
@click.option("--threshold-windows", type=click.IntRange(min=1), default=None,
              help="sits: consecutive breaching windows that fire the switch (default 3; implies --threshold).")
@click.option("--instances", type=int, default=None,
              help="Serve with N instances behind a router, each with its own pool of -c blocks "
                   "(docs/serving-routing.md).")
@click.option("--routing", default=None, help="With --instances: round-robin (default) or prefix (cache-aware).")
@click.option("--cache-threshold", type=float, default=0.5, show_default=True,
              help="prefix routing: the least matched share of the prompt that routes to the best match.")
@click.option("--router-ttl", type=DURATION, default="120s", show_default=True,
              help="prefix routing: how long the router remembers a block it sent to an instance.")
@click.option("--load-window", type=DURATION, default="60s", show_default=True,
              help="prefix routing: an instance's load is the requests sent to it in this last window.")
@click.option("--balance-abs", type=int, default=32, show_default=True,
              help="prefix routing: imbalanced when max - min load exceeds this ...")
@click.option("--balance-rel", type=float, default=1.0001, show_default=True,
              help="... and max load exceeds this times the min; then the least loaded instance.")
@click.option("--concurrency", type=int, default=None,
              help="Closed loop: N clients, each sending its next request when its last one ends (vLLM's "
                   "benchmark --max-concurrency); without TRACE, a synthetic workload of --isl/--osl.")
@click.option("--isl", type=int, default=None, help="--concurrency without TRACE: prompt tokens (random, unshared).")
@click.option("--osl", type=int, default=None, help="--concurrency without TRACE: output tokens per request.")
@click.option("--requests", type=int, default=None, help="--concurrency without TRACE: requests in all "
              "(default 4 per client).")
@replay_extras
def replay_cmd(trace_path, engine, policy_text, capacity_text, kv_block_tokens, rate_scale, max_num_batched_tokens,
               max_num_seqs, calibration, model_name, seed, skip_bad_lines, fmt, as_json, window_s=None,
               threshold=False, threshold_windows=None, instances=None, routing=None, cache_threshold=0.5,
               router_ttl="120s", load_window="60s", balance_abs=32, balance_rel=1.0001, concurrency=None, isl=None,
               osl=None, requests=None, weight_dtype=None, kv_dtype=None, tp=None, reserve_full_isl=True, gpu=None,
               gpu_memory_utilization=0.9, allow_oversized_pool=False, prefill_first=False, sglang_admission=False,
               sglang_ignore_eos=False) -> None:
    """Serve TRACE's requests through a serving engine: arrivals at their timestamps, continuous batching,
    chunked prefill, the engine's prefix-cache rules, the policy ordering the evictable blocks."""
    replays = check_early(engine, policy_text, capacity_text, rate_scale)
    # built once, at the edge (before the kernels' import)
    config = replay_config(engine, policy_text, capacity_text, kv_block_tokens, rate_scale, max_num_batched_tokens,
                           max_num_seqs, calibration, model_name, seed, window_s, threshold, threshold_windows,
                           weight_dtype, kv_dtype, tp, gpu, gpu_memory_utilization, allow_oversized_pool,
                           concurrency, reserve_full_isl, prefill_first=prefill_first,
                           sglang_admission=sglang_admission, sglang_ignore_eos=sglang_ignore_eos)
    from sitsprof.policies.serving.summary import replay_document, replay_table

    rb = None
    if (concurrency, isl, osl, requests) != (None,) * 4:
        from .validate import closed_loop_source

        trace, rb, trace_path, fmt = closed_loop_source(trace_path, fmt, skip_bad_lines, concurrency, isl, osl,
                                                        requests, kv_block_tokens, instances)
    elif trace_path is None:
        raise click.UsageError("give a TRACE, or --concurrency N --isl I --osl O for a synthetic closed loop")
    if instances is not None or routing is not None:
        _routed_replay(trace_path, fmt, skip_bad_lines, as_json, config, instances, routing, cache_threshold,
                       router_ttl, load_window, balance_abs, balance_rel)
        return
    if rb is None:
        trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    doc = followed(replays, replay_document, not as_json)(trace, trace_path, fmt, config, reblocked=rb)
    add_verdict(doc)
    if as_json:
        emit_json(doc)
        return
    show(doc, replay_table(doc))
    for row in doc["replay"]:
        for line in row["warnings"]:
            click.echo(f"sitsprof: warning: {row['policy']} at {row['capacity']:,}: {line}", err=True)


def replay_config(engine, policy_text, capacity_text, kv_block_tokens, rate_scale, max_num_batched_tokens,
                  max_num_seqs, calibration, model_name, seed, window_s, threshold, threshold_windows, weight_dtype,
                  kv_dtype, tp, gpu, gpu_memory_utilization, allow_oversized_pool, concurrency=None,
                  reserve_full_isl=True, prefill_first=False, sglang_admission=False, sglang_ignore_eos=False,
                  **_unused):
    """The one ReplayConfig of `policy replay` (and `policy plan`), built at the edge from the
    options: the engine, the model (a preset or a config.json, at its precisions and TP), the
    pool, the arrivals; everything below reads this one object."""
    from sitsprof.policies.cost.models import DEFAULT_MODEL, get_model
    from sitsprof.policies.serving.config import ReplayConfig

    return ReplayConfig(
        engine=engine, block_tokens=kv_block_tokens, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, model=get_model(model_name or DEFAULT_MODEL, dtype=weight_dtype,
                                                   kv_dtype=kv_dtype, tp=tp),
        calibration=calibration, capacities=capacity_text, gpu=gpu and gpu.lower(),
        gpu_memory_utilization=gpu_memory_utilization, allow_oversized_pool=allow_oversized_pool,
        rate_scale=rate_scale, concurrency=concurrency, seed=seed, policies=policy_text,
        reserve_full_isl=reserve_full_isl, prefill_first=prefill_first, sglang_admission=sglang_admission,
        sglang_ignore_eos=sglang_ignore_eos, window_s=window_s,
        threshold=threshold or threshold_windows is not None,
        sits={"threshold_windows": threshold_windows} if threshold_windows else None,
    ).checked()


def _routed_replay(trace_path, fmt, skip_bad_lines, as_json, config, instances, routing, cache_threshold, router_ttl,
                   load_window, balance_abs, balance_rel) -> None:
    """`policy replay --instances N [--routing R]`: the router's settings checked before the trace is read."""
    from dataclasses import replace

    from sitsprof.policies.errors import ServingReplayError
    from sitsprof.policies.serving.names import serving_names
    from sitsprof.policies.serving.routing import RouterSettings, check_routing, routed_document, routed_table

    if instances is None:
        raise ServingReplayError(f"--routing {routing} routes between instances; add --instances N (--instances 4)")
    routing = check_routing(instances, routing or "round-robin")
    settings = RouterSettings(ttl_s=router_ttl, load_window_s=load_window,
                              balance_abs=balance_abs, balance_rel=balance_rel,
                              cache_threshold=cache_threshold).checked()
    config = replace(config, instances=instances, routing=routing, router=settings)
    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    total = len(serving_names(config.policies)) * len((config.capacities or "memory").split(",")) * instances
    doc = add_verdict(followed(total, routed_document, not as_json)(trace, trace_path, fmt, config))
    if as_json:
        emit_json(doc)
        return
    show(doc, routed_table(doc))
    for row in doc["routing"]["aggregate"]:
        for line in row["warnings"]:
            click.echo(f"sitsprof: warning: {row['policy']} at {row['capacity']:,}: {line}", err=True)


plan_cmd = make_plan_cmd(replay_cmd, replay_config)

policy_group = click.Group(
    "policy", commands=[simulate_cmd, mrc_cmd, list_cmd, generate_cmd, serve_metrics, claims_cmd,
              replay_cmd, validate_cmd, plan_cmd],
    help="Replay KV-cache block traces through replacement policies (LRU, ARC, LIRS, ...).",
)

COMMANDS = [policy_group]
