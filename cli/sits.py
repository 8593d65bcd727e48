"""`sitsprof policy serve-metrics` and `sitsprof policy claims`: the SITS commands of the `policy` group.

Wiring only: the replays are `sitsprof.policies.sweep.run_policies`, the metrics
`sitsprof.policies.adaptive.metrics`, the claims `sitsprof.policies.claims`. cli/policy.py
lists these commands in its group; this module registers nothing.
"""
from __future__ import annotations

import time

import click

from .console import load_trace, run_with_progress, stdout_console


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
    from sitsprof.policies.adaptive.metrics import build_registry, exposition, serve
    from sitsprof.policies.engine.capacity import parse_capacities
    from sitsprof.policies.registry import select_policies
    from sitsprof.policies.sweep import run_policies

    policies = select_policies(policy_text)
    trace, _ = load_trace(trace_path, None, False)
    capacities = parse_capacities(capacity_text, trace.n_blocks)
    results = run_with_progress(trace, policies, capacities, not once, simulate=run_policies,
                                calibration=calibration, model=model_name)
    registry = build_registry(results, trace.span_s)
    if once:
        click.echo(exposition(registry), nl=False)
        return
    from sitsprof.common.httpserve import exposure_warning, url

    server, _thread = serve(registry, port=port, addr=addr)
    host, bound = server.server_address[:2]
    click.echo(f"serving metrics of {len(results)} run(s) at {url(host, bound)} (Ctrl-C stops)", err=True)
    warning = exposure_warning(addr)
    if warning:
        click.echo(warning, err=True)
    try:
        if duration is None:
            while True:
                time.sleep(3600)
        time.sleep(duration)
    finally:
        server.shutdown()
        server.server_close()


@click.command("claims")
@click.option("--mooncake", "mooncake_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Also run on this Mooncake trace (at 1000, 10000, 50000 blocks).")
@click.option("--seed", default=0, show_default=True, help="Seed of the three-stack workload.")
@click.option("--calibration", default=None, help="Calibration JSON (default: hopper-published, not measured).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
def claims_cmd(mooncake_path, seed, calibration, as_json):
    """Re-run the brief's comparisons (LRU vs prefix vs semantic shard; LIRS vs LRU vs LFU) on the
    three-stack workload (capacities 1%/10%/50% of its blocks) and, if given, a Mooncake trace."""
    from sitsprof.common import jsonout
    from sitsprof.policies.claims import run_claims
    from sitsprof.policies.sweep import run_policies

    def sweep(trace, policies, capacities, **kwargs):
        return run_with_progress(trace, policies, capacities, not as_json, simulate=run_policies, **kwargs)

    mooncake = load_trace(mooncake_path, None, False)[0] if mooncake_path else None
    document = run_claims(seed=seed, mooncake=mooncake, calibration=calibration, sweep=sweep)
    if as_json:
        click.echo(jsonout.dumps(document, indent=2))
        return
    for claim in document:
        stdout_console().print(_claims_table(claim))


def _claims_table(claim: dict):
    from rich.table import Table

    rows = claim["rows"]
    table = Table(title=f"{claim['workload']} ({claim['blocks']:,} blocks): {claim['claim']}", title_justify="left")
    stacks = list(rows[0]["stack_hit_ratio"]) if rows else []
    for col in ["policy", "capacity", "block hit", "prefix hit", *[f"hit {s}" for s in stacks], "P95 ms", "tok/s"]:
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in rows:
        tps = r["tokens_per_s"]
        table.add_row(r["policy"], f"{r['capacity']:,}", f"{r['block_hit_ratio']:.4f}", f"{r['prefix_hit_ratio']:.4f}",
                      *[f"{r['stack_hit_ratio'][s]:.4f}" for s in stacks], f"{r['ttft_p95_ms']:,.1f}",
                      "-" if tps is None else f"{tps:,.1f}")
    return table


COMMANDS: list = []  # serve-metrics and claims are sub-commands of `policy` (cli/policy.py lists them)
