"""`policy replay`'s table: the columns a serving engineer reads, in 100 columns.

The document (`--json`, the report) holds every figure of a replay; the table keeps the ones
that decide between policies and pool sizes (TTFT P50/P99, TPOT P99, queue wait P99, output
tokens/s, prefix hit ratio, preemptions, saturation) so that the default table fits a
100-column terminal, and a log or a pipe, whole. No cell is ever cut: columns do not wrap,
and `fit_width` gives the width a console needs to print the table without shrinking one
(a narrower terminal then wraps the lines, it never drops a figure or a policy's name).
Latencies are in ms everywhere (table, JSON, report); tokens/s says which tokens it counts.
"""
from __future__ import annotations

from .saturation import saturation_lines
from .slo import saturation

__all__ = ["COLUMNS", "TARGET_WIDTH", "fit_width", "ms", "replay_cells", "replay_table", "sits_line"]

#: (header, justify): the default table; `replay_table` fills them from a replay row.
COLUMNS = (("policy", "left"), ("blocks", "right"), ("TTFT p50", "right"), ("TTFT p99", "right"),
           ("TPOT p99", "right"), ("queue p99", "right"), ("out tok/s", "right"), ("prefix hit", "right"),
           ("preempt", "right"), ("sat.", "left"))
#: The widest default table (7 policies' names, 7-digit pools, 6-digit latencies) fits this.
TARGET_WIDTH = 100


def ms(v) -> str:
    """A latency in ms: whole ms from 10 ms up, one decimal below; '-' when undefined."""
    if v is None or v != v:
        return "-"
    return f"{v:,.1f}" if abs(v) < 10 else f"{v:,.0f}"


def replay_cells(row: dict) -> list[str]:
    """One replay row's cells, in COLUMNS' order."""
    sat = saturation(row)
    out = row.get("output_tokens_per_s")
    return [str(row["policy"]), f"{row['capacity']:,}", ms(row["ttft_p50_ms"]), ms(row["ttft_p99_ms"]),
            ms(row.get("tpot_p99_ms")), ms(row.get("queue_wait_p99_ms")),
            "-" if out is None or out != out else f"{out:,.0f}", f"{row['prefix_hit_ratio']:.4f}",
            f"{row.get('preemptions', 0):,}", "yes" if sat else ""]


def replay_table(doc: dict):
    """The replays of `doc` (a `policy replay` document) as a rich Table that fits 100 columns."""
    from rich import box
    from rich.table import Table

    t = doc["trace"]
    e = doc["engine"]
    title = (f"{t.get('path') or ''}: {t['requests']:,} requests, {e['engine']} rules, "
             f"{e['block_tokens']}-token blocks ({t['kv_blocks']:,} in the trace), arrival rate x{e['rate_scale']:g}; "
             "latencies in ms")
    table = Table(title=title, title_justify="left", caption_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify, no_wrap=True)
    for r in doc["replay"]:
        table.add_row(*replay_cells(r))
    lines = ["blocks: the KV pool; out tok/s: output tokens per simulated second (prompt and total tokens/s, "
             "TPOT P50, block hit, peak pinned, rejected: --json or the report); sat.: saturated (the verdict "
             "below says why)"]
    if doc["replay"]:
        shares = doc["replay"][0]["term_share"]
        lines.append(f"step time: {doc['replay'][0]['latency_model']}; share of the summed terms: "
                     + ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items()))
        pool = e.get("pool") or {}
        if pool.get("line"):
            lines.append(f"pool ({pool['source']}): {pool['line']}")
        lines.extend(saturation_lines(doc["replay"]))
        lines.extend(sits_line(r) for r in doc["replay"] if r.get("sits"))
    table.caption = "\n".join(lines)
    return table


def fit_width(console, table) -> int:
    """The width `console` must have to print `table` without shrinking a column: its natural
    width (every column as wide as its widest cell), or the console's own when wider."""
    from rich.measure import Measurement

    need = Measurement.get(console, console.options.update(width=10_000), table).maximum
    return max(console.width, need)


def sits_line(row: dict) -> str:
    """One line on a sits replay's controller: windows, switches, behaviour shares, the threshold engine."""
    x = row["sits"]
    share = ", ".join(f"{k} {100 * v:.0f}%" for k, v in x["behaviour_share"].items())
    text = (f"sits at {row['capacity']:,}: {x['decided_windows']:,} decisions in {x['window_s']:g} s windows, "
            f"{x['switches']} behaviour switches; served {share}")
    th = x.get("threshold")
    if th is not None:
        sw = [e for e in x["events"] if e["event"] == "switch"]
        done = f"switched LIRS->SITS at t={sw[0]['time']:.1f} s" if sw else "no switch"
        text += f"; threshold engine: {done}, {th['rollbacks']} rollbacks"
    return text
