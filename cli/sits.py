"""SITS wiring for the CLI: costed replays (calibration, model, miss cost), the cost table,
and `sitsprof policy serve-metrics`. Logic lives in sitsprof.policies; this only wires."""
from __future__ import annotations

import time

import click

COST_COLUMNS = ("policy", "capacity", "block hit", "TTFT P50 ms", "P95 ms", "P99 ms", "tok/s", "CTCCI", "notes")


def run_policies(trace, policies, capacities, show: bool, calibration=None, model=None, miss="recompute",
                 console=None, params=None):
    """Every policy at every capacity through the cost model (SITS policies get the trace,
    hence time windows, TTL and their event logs), with a progress bar when `show`;
    `params`: {policy: {name: value}} from sitsprof.policies.params.bind."""
    from sitsprof.policies.costmodel import simulate_many_costed
    from sitsprof.policies.metrics import result_metrics
    from sitsprof.policies.models import DEFAULT_MODEL

    from .policy import run_with_progress

    results = run_with_progress(trace, policies, capacities, show, console, simulate=simulate_many_costed,
                                calibration=calibration, model=model or DEFAULT_MODEL, miss=miss, params=params)
    for r in results:  # the Prometheus figures, also in --json
        r.extra["metrics"] = result_metrics(r, trace.span_s)
    return results


def _notes(result) -> str:
    extra = result.extra or {}
    if "behaviour_share" in extra:
        share = extra["behaviour_share"]
        n = extra["switches"]
        return f"{n} switch{'' if n == 1 else 'es'}; recency {share['recency']:.0%}"
    if "shard_expirations" in extra:
        return f"{sum(extra['shard_expirations']):,} expired; {extra['shard_eviction_rate']:.1f} evict/s"
    return ""


def cost_table(results, title: str | None = None):
    """Rich table: hit ratio and the cost model's TTFT percentiles per result."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in COST_COLUMNS:
        table.add_column(name, justify="left" if name in ("policy", "notes") else "right", no_wrap=name != "notes")
    for r in results:
        cost = r.extra.get("cost") or {}
        tenancy = r.extra.get("tenancy") or {}
        tps = cost.get("tokens_per_s")
        table.add_row(
            r.policy, f"{r.capacity:,}", f"{r.block_hit_ratio:.4f}", f"{cost.get('ttft_p50_ms', 0):,.1f}",
            f"{cost.get('ttft_p95_ms', 0):,.1f}", f"{cost.get('ttft_p99_ms', 0):,.1f}",
            "-" if tps is None else f"{tps:,.1f}",
            f"{tenancy.get('ctcci', 0):.3f} {tenancy.get('level', '')}" if tenancy.get("tenants", 0) > 1 else "-",
            _notes(r),
        )
    return table


def cost_title(results) -> str:
    cost = next((r.extra.get("cost") for r in results if r.extra.get("cost")), None) or {}
    return (f"cost model: calibration {cost.get('calibration', '?')}, model {cost.get('model', '?')}, "
            f"miss = {cost.get('miss', '?')} (service time, no queueing)")


@click.command("serve-metrics")
@click.argument("trace_path", metavar="TRACE")
@click.option("--policy", "-p", "policy_text", default="sits,semantic-shard", show_default=True,
              help="Comma-separated policy names, or 'all'.")
@click.option("--capacity", "-c", "capacity_text", default="10%", show_default=True,
              help="Capacities in blocks (1000, 10k) or % of the trace's distinct blocks.")
@click.option("--calibration", default=None, help="Calibration JSON (default: hopper-published, not measured).")
@click.option("--model", "model_name", default=None, help="Model preset for the cost model (default qwen2-72b).")
@click.option("--bind", "addr", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9464, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Serve for this many seconds, then exit (default: until interrupted).")
@click.option("--once", is_flag=True, help="Print the metrics in Prometheus text format and exit (no server).")
def serve_metrics(trace_path, policy_text, capacity_text, calibration, model_name, addr, port, duration, once):
    """Replay TRACE, then expose semantic_cache_hit_ratio, shard_eviction_rate and CTCCI to Prometheus."""
    from sitsprof.policies.metrics import build_registry, exposition, serve

    from .policy import load_trace, parse_capacities, parse_policies

    policies = parse_policies(policy_text)
    trace, _ = load_trace(trace_path, None, False)
    capacities = parse_capacities(capacity_text, trace.n_blocks)
    results = run_policies(trace, policies, capacities, show=not once, calibration=calibration, model=model_name)
    registry = build_registry(results, trace.span_s)
    if once:
        click.echo(exposition(registry), nl=False)
        return
    server, _thread = serve(registry, port=port, addr=addr)
    host, bound = server.server_address[:2]
    click.echo(f"serving metrics of {len(results)} run(s) at http://{host}:{bound}/metrics (Ctrl-C stops)", err=True)
    try:
        if duration is None:
            while True:
                time.sleep(3600)
        time.sleep(duration)
    finally:
        server.shutdown()
        server.server_close()


# The brief's claims (DESIGN.md), re-run rather than repeated.
CLAIMS = (
    ("lru,prefix_lru,semantic-shard", "claimed hit: LRU 21% / prefix cache 44% / semantic shard 69% (128K context)"),
    ("lirs,lru,lfu", "claimed: LIRS 63.2% hit, 2.1 TPS, 417 ms P95 vs LRU 48.7%, 1.6 TPS, 589 ms"),
)


@click.command("claims")
@click.option("--mooncake", "mooncake_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Also run on this Mooncake trace (at 1000, 10000, 50000 blocks).")
@click.option("--seed", default=0, show_default=True, help="Seed of the three-stack workload.")
@click.option("--calibration", default=None, help="Calibration JSON (default: hopper-published, not measured).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
def claims_cmd(mooncake_path, seed, calibration, as_json):
    """Re-run the brief's comparisons (LRU vs prefix vs semantic shard; LIRS vs LRU vs LFU) on the
    three-stack workload (capacities 1%/10%/50% of its blocks) and, if given, a Mooncake trace."""
    import json

    from sitsprof.policies.traces import generator
    from sitsprof.policies.tenancy import tenant_hit_ratios

    from .policy import fraction_capacities, load_trace, parse_policies, stdout_console

    workloads = []
    requests = generator.generate_requests(seed=seed)
    trace = generator.requests_to_trace(requests, source=f"generator(seed={seed})")
    workloads.append(("three-stack", trace, fraction_capacities(trace.n_blocks, (0.01, 0.1, 0.5))))
    if mooncake_path:
        workloads.append(("mooncake", load_trace(mooncake_path, None, False)[0], [1000, 10000, 50000]))
    document = []
    for name, tr, caps in workloads:
        for policy_text, claim in CLAIMS:
            results = run_policies(tr, parse_policies(policy_text), caps, show=not as_json, calibration=calibration)
            rows = []
            for r in results:
                cost = r.extra.get("cost") or {}
                stacks = tenant_hit_ratios(tr, r.request_hits, keep_empty=True)
                rows.append({"policy": r.policy, "capacity": r.capacity, "block_hit_ratio": r.block_hit_ratio,
                             "prefix_hit_ratio": r.prefix_hit_ratio, "ttft_p95_ms": cost.get("ttft_p95_ms"),
                             "ttft_p99_ms": cost.get("ttft_p99_ms"), "tokens_per_s": cost.get("tokens_per_s"),
                             "stack_hit_ratio": stacks})
            document.append({"workload": name, "blocks": int(tr.n_blocks), "claim": claim, "rows": rows})
            if not as_json:
                stdout_console().print(_claims_table(name, tr, claim, rows))
    if as_json:
        click.echo(json.dumps(document, indent=2))


def _claims_table(name, trace, claim, rows):
    from rich.table import Table

    table = Table(title=f"{name} ({trace.n_blocks:,} blocks): {claim}", title_justify="left")
    stacks = list(rows[0]["stack_hit_ratio"]) if rows else []
    for col in ["policy", "capacity", "block hit", "prefix hit", *[f"hit {s}" for s in stacks], "P95 ms", "tok/s"]:
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in rows:
        tps = r["tokens_per_s"]
        table.add_row(r["policy"], f"{r['capacity']:,}", f"{r['block_hit_ratio']:.4f}", f"{r['prefix_hit_ratio']:.4f}",
                      *[f"{r['stack_hit_ratio'][s]:.4f}" for s in stacks], f"{r['ttft_p95_ms']:,.1f}",
                      "-" if tps is None else f"{tps:,.1f}")
    return table


def _register() -> None:
    from .policy import policy_group

    for command in (serve_metrics, claims_cmd):
        if command.name not in policy_group.commands:
            policy_group.add_command(command)


_register()
COMMANDS: list = []  # serve-metrics joins the `policy` group above
