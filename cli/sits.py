"""`sitsprof policy serve-metrics` and `sitsprof policy claims`: the SITS commands of the `policy` group.

Wiring only: the replays are `sitsprof.policies.sweep.run_policies`, the metrics
`sitsprof.policies.engine.metrics`, the claims `sitsprof.policies.claims`. cli/policy.py
lists these commands in its group; this module registers nothing.
"""
from __future__ import annotations

import time

import click

from .console import load_trace, run_with_progress, stdout_console
from .options import DURATION, calibration_option

__all__ = ["COMMANDS", "claims_cmd", "serve_metrics"]


@click.command("serve-metrics")
@click.argument("trace_path", metavar="TRACE")
@click.option("--policy", "-p", "policy_text", default="sits,semantic-shard", show_default=True,
              help="Comma-separated policy names, or 'all'.")
@click.option("--capacity", "-c", "capacity_text", default="10%", show_default=True,
              help="Capacities in blocks (1000, 10k) or % of the trace's distinct blocks.")
@click.option("--calibration", default=None, callback=calibration_option,
              help="Calibration JSON (default: hopper-published, not measured).")
@click.option("--model", "model_name", default=None, help="Model preset for the cost model (default qwen2-72b).")
@click.option("--bind", "addr", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9464, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--duration", type=DURATION, default=None,
              help="Serve this long (30s, 10m), then exit (default: until interrupted).")
@click.option("--once", is_flag=True, help="Print the metrics in Prometheus text format and exit (no server).")
def serve_metrics(trace_path, policy_text, capacity_text, calibration, model_name, addr, port, duration, once):
    """Replay TRACE, then expose semantic_cache_hit_ratio, shard_eviction_rate and CTCCI to Prometheus."""
    from sitsprof.policies.engine.capacity import parse_capacities
    from sitsprof.policies.engine.metrics import build_registry, exposition, serve
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
@click.option("--mooncake", "mooncake_path", default=None,
              help="Also run on this Mooncake trace (at 1000, 10000, 50000 blocks); bundled:mooncake is "
                   "the one sitsprof ships.")
@click.option("--seed", default=0, show_default=True, help="Seed of the three-stack workload.")
@click.option("--calibration", default=None, callback=calibration_option,
              help="Calibration JSON (default: hopper-published, not measured).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--under-load", is_flag=True,
              help="Also re-run them through the serving replay (vLLM rules) on the Mooncake trace (--mooncake, "
                   "else bundled:mooncake) at arrivals x0.25, x1, x2, x4 and pools of 3% and 10% of its 16-token "
                   "blocks (26 replays, several minutes).")
def claims_cmd(mooncake_path, seed, calibration, as_json, under_load):
    """Re-run the brief's comparisons (LRU vs prefix vs semantic shard; LIRS vs LRU vs LFU) on the
    three-stack workload (capacities 1%/10%/50% of its blocks) and, if given, a Mooncake trace;
    with --under-load, also through the serving replay under compressed arrivals."""
    from sitsprof.common import jsonout
    from sitsprof.policies.claims import run_claims
    from sitsprof.policies.sweep import run_policies

    def sweep(trace, policies, capacities, **kwargs):
        return run_with_progress(trace, policies, capacities, not as_json, simulate=run_policies, **kwargs)

    mooncake = load_trace(mooncake_path, None, False)[0] if mooncake_path else None
    document = run_claims(seed=seed, mooncake=mooncake, calibration=calibration, sweep=sweep)
    if under_load:
        from sitsprof.policies.claims import run_claims_under_load

        if mooncake is None:
            mooncake = load_trace("bundled:mooncake", None, False)[0]

        def progress(done, total, label):
            if not as_json:
                click.echo(f"  under load: replay {done + 1}/{total}: {label}", err=True)

        document += run_claims_under_load(mooncake, calibration=calibration, progress=progress)
    if as_json:
        click.echo(jsonout.dumps(document, indent=2))
        return
    for claim in document:
        stdout_console().print(_under_load_table(claim) if "under_load" in claim else _claims_table(claim))


def _claims_table(claim: dict):
    """One claim on one workload: rows by capacity, each capacity's verdict (holds / does not
    hold) in the verdict column of its first row, and under the table the measured numbers
    each verdict compared."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from .console import TOKENS_COLUMN, calibration_label

    rows = claim["rows"]
    cost = {"calibration": rows[0].get("calibration"), "calibration_kind": rows[0].get("calibration_kind")} \
        if rows else {}
    table = Table(title=f"{claim['workload']} ({claim['blocks']:,} blocks): {claim['claim']}", title_justify="left",
                  box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    stacks = list(rows[0]["stack_hit_ratio"]) if rows else []
    # (prefix hit ratio: in --json; the table keeps to what the claims compare, in 120 columns)
    columns = ["capacity", "policy", "block hit", *[f"hit {s}" for s in stacks], "P95 ms",
               TOKENS_COLUMN, "verdict"]
    verdicts = {v["capacity"]: v for v in claim.get("verdicts", [])}
    styles = {"holds": "green", "does not hold": "bold red"}
    groups = []
    for capacity in dict.fromkeys(r["capacity"] for r in rows):
        verdict = verdicts.get(capacity)
        group = []
        for i, r in enumerate(x for x in rows if x["capacity"] == capacity):
            tps = r["tokens_per_s"]
            group.append([f"{capacity:,}" if i == 0 else "", r["policy"], f"{r['block_hit_ratio']:.4f}",
                          *[f"{r['stack_hit_ratio'][s]:.4f}" for s in stacks],
                          "-" if r["ttft_p95_ms"] is None else f"{r['ttft_p95_ms']:,.1f}",
                          "-" if tps is None else f"{tps:,.1f}",
                          verdict["verdict"] if i == 0 and verdict is not None else ""])
        groups.append(group)
    for j, col in enumerate(columns):
        # every figure whole (min_width), headers fold onto two lines when the terminal is narrow
        width = max([len(g[j]) for group in groups for g in group] + [4])
        table.add_column(col, justify="left" if col in ("policy", "verdict") else "right", min_width=width,
                         overflow="fold")
    for group in groups:
        for cells in group:
            if cells[-1]:
                cells[-1] = f"[{styles.get(cells[-1], 'yellow')}]{cells[-1]}[/]"
            table.add_row(*cells)
        table.add_section()
    lines = [Text(f"  at {v['capacity']:,} blocks: {v['summary']}") for v in claim.get("verdicts", [])]
    lines.append(Text(f"  calibration {calibration_label(cost)}; the verdict checks the claim's comparison, "
                      "not its figures (quoted for other workloads)"))
    return Group(table, *lines)


def _under_load_table(claim: dict):
    """One claim through the serving replay: rows by arrival rate and pool, each (rate, pool)'s
    verdict in its first row, the measured comparisons under the table."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def num(v, fmt):
        return "-" if v is None else fmt.format(v)

    u = claim["under_load"]
    table = Table(title=f"{claim['workload']} ({claim['blocks']:,} {u['block_tokens']}-token blocks): "
                        f"{claim['claim']}", title_justify="left", box=box.SIMPLE_HEAD, collapse_padding=True,
                  pad_edge=False)
    for col in ("rate", "pool", "policy", "block hit", "prefix hit", "TTFT P95 s", "TTFT P99 s", "out tok/s",
                "req/s", "preempt", "verdict"):
        table.add_column(col, justify="left" if col in ("policy", "verdict") else "right")
    verdicts = {(v["rate_scale"], v["capacity"]): v for v in claim["verdicts"]}
    styles = {"holds": "green", "does not hold": "bold red"}
    seen = set()
    for r in claim["rows"]:
        key = (r["rate_scale"], r["capacity"])
        first = key not in seen
        if first and seen:
            table.add_section()
        seen.add(key)
        v = verdicts.get(key)
        verdict = f"[{styles.get(v['verdict'], 'yellow')}]{v['verdict']}[/]" if first and v else ""
        table.add_row(f"x{r['rate_scale']:g}" if first else "", f"{r['capacity']:,}" if first else "", r["policy"],
                      num(r["block_hit_ratio"], "{:.4f}"), num(r["prefix_hit_ratio"], "{:.4f}"),
                      num(None if r["ttft_p95_ms"] is None else r["ttft_p95_ms"] / 1e3, "{:,.1f}"),
                      num(None if r["ttft_p99_ms"] is None else r["ttft_p99_ms"] / 1e3, "{:,.1f}"),
                      num(r["output_tokens_per_s"], "{:,.1f}"), num(r["requests_per_s"], "{:.3f}"),
                      num(r["preemptions"], "{:,}"), verdict)
    lines = [Text(f"  x{v['rate_scale']:g}, {v['capacity']:,} blocks: {v['summary']}") for v in claim["verdicts"]]
    lines += [Text(f"  {r['policy']}: {r['note']}") for r in {r["policy"]: r for r in claim["rows"] if r.get("note")}
              .values()]
    return Group(table, *lines)


COMMANDS: list = []  # serve-metrics and claims are sub-commands of `policy` (cli/policy.py lists them)
