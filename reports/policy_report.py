"""The policy engine's results as a report section: hit ratio and P99 per capacity, and the
SITS controller's decision timeline.

The file is read and checked by `sitsprof.policies.engine.results.read_results`, which owns
the format on both sides (what the engine writes and what this section reads back).
"""
from __future__ import annotations

from typing import Any

from sitsprof.policies.engine.results import decisions_from_rows, row_p99_ms

from .axes import axis_titles
from .html import PALETTE, Figure, Section, Table, plot_text

__all__ = ["CAPACITY_DASHES", "POLICY_SYMBOLS", "policy_section"]

POLICY_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "triangle-down", "cross",
                  "pentagon", "hexagon", "circle-open", "square-open", "diamond-open")


def _policy_trace(policy: str, xs, ys, style: dict) -> dict:
    return {"type": "scatter", "mode": "lines+markers", "name": plot_text(policy), "x": xs, "y": ys,
            "line": {"color": style["color"]},
            "marker": {"color": style["color"], "symbol": style["symbol"], "size": 7}}


def _curve_figure(curves) -> Figure | None:
    """The hit-ratio curves (`policy mrc --json`'s `curves`) as one plot on a log capacity
    axis; Belady, the offline optimum, dashed as the headroom line. None without curves."""
    if not isinstance(curves, list):
        return None
    data, notes = [], []
    for i, curve in enumerate(c for c in curves if isinstance(c, dict)):
        pts = [p for p in curve.get("points") or [] if isinstance(p, dict)
               and isinstance(p.get("capacity"), (int, float)) and isinstance(p.get("hit_ratio"), (int, float))]
        if not pts:
            continue
        policy = str(curve.get("policy"))
        colour = PALETTE[i % len(PALETTE)]
        trace = _policy_trace(policy + (" (offline optimal)" if policy == "belady" else ""),
                              [p["capacity"] for p in pts], [p["hit_ratio"] for p in pts],
                              {"color": colour, "symbol": POLICY_SYMBOLS[i % len(POLICY_SYMBOLS)]})
        if policy == "belady":
            trace["line"]["dash"] = "dash"
        data.append(trace)
        method = curve.get("method")
        if method == "shards":
            notes.append(f"{policy} sampled (SHARDS, rate from {curve.get('sample_rate', 0):.3g})")
        elif method:
            notes.append(f"{policy} exact ({method})")
    if not data:
        return None
    caption = ("Block hit ratio over log-spaced capacities: " + "; ".join(notes) + "." if notes else "")
    return Figure("Hit-ratio curves", data, axis_titles("capacity (blocks)", "block hit ratio", xaxis={"type": "log"}),
                  caption=caption)


def _replay_parts(replay) -> tuple[list, list]:
    """The serving replays (`policy replay --json`'s `replay`): a table, the TTFT CDF of each
    replay, and queue length and prefix hit ratio over simulated time."""
    if not isinstance(replay, list):
        return [], []
    entries = [r for r in replay if isinstance(r, dict)]
    if not entries:
        return [], []
    rows = [[r.get("policy"), r.get("capacity"), r.get("ttft_p50_ms"), r.get("ttft_p99_ms"),
             r.get("tpot_p50_ms"), r.get("tpot_p99_ms"), r.get("queue_wait_p99_ms"), r.get("prompt_tokens_per_s"),
             r.get("output_tokens_per_s"), r.get("tokens_per_s"), r.get("block_hit_ratio"),
             r.get("prefix_hit_ratio"), r.get("preemptions"), r.get("peak_pinned_blocks"), r.get("rejected"),
             {True: "NO (saturated)", False: "yes"}.get(r.get("saturated"), "-")]
            for r in entries]
    engines = sorted({str(r.get("engine")) for r in entries})
    table = Table(["policy", "pool (blocks)", "TTFT P50 (ms)", "TTFT P99 (ms)", "TPOT P50 (ms)", "TPOT P99 (ms)",
                   "queue wait P99 (ms)", "prompt tokens/s", "output tokens/s", "total tokens/s", "block hit ratio",
                   "prefix hit ratio", "preemptions", "peak pinned blocks", "rejected", "kept up"], rows,
                  title="Serving replay",
                  caption=f"{', '.join(engines)} rules. Latencies in ms; prompt and output tokens/s: the finished "
                          "requests' tokens per simulated second; total tokens/s: every token scheduled "
                          "(prefill, recomputed after a preemption, and decode).")
    cdf, queue, hits = [], [], []
    styles = _replay_styles(entries)
    for i, r in enumerate(entries):
        name = f"{r.get('policy')} @ {r.get('capacity'):,}" if isinstance(r.get("capacity"), int) else str(
            r.get("policy"))
        if isinstance(r.get("instance"), int):  # policy replay --instances N: one entry per instance
            name += f", instance {r['instance']}"
        style = styles[i]
        values = [v for v in r.get("ttft_cdf_ms") or [] if isinstance(v, (int, float))]
        if len(values) == 101:
            cdf.append(_replay_line(name, values, [p / 100 for p in range(101)], style))
        series = [w for w in r.get("series") or [] if isinstance(w, dict)]
        if series:
            xs = [w.get("time_s") for w in series]
            queue.append(_replay_line(name, xs, [w.get("waiting") for w in series], style))
            hits.append(_replay_line(name, xs, [w.get("hit_ratio") for w in series], style))
    figs = []
    if cdf:
        figs.append(Figure("TTFT distribution per policy (serving replay)", cdf,
                           axis_titles("time to first token (ms)", "share of requests", xaxis={"type": "log"})))
    if queue:
        figs.append(Figure("Waiting requests over time (serving replay)", queue,
                           axis_titles("simulated time (s)", "requests waiting"),
                           caption="Requests arrived and not yet first scheduled, at the middle of 100 windows."))
    if hits:
        figs.append(Figure("Block hit ratio over time (serving replay)", hits,
                           axis_titles("simulated time (s)", "block hit ratio (cached prefix)"),
                           caption="Hit blocks over full prompt blocks of the requests first scheduled "
                                   "in each window."))
    sits_tables, sits_figs = _replay_sits(entries)
    return [table, *sits_tables], figs + sits_figs


#: Line dashes telling a policy's capacities apart (its colour is the policy's).
CAPACITY_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def _replay_styles(entries) -> list[dict]:
    """One style per replay: the colour is its policy's and the dash its capacity's (the marker its
    instance's, with --instances), so a sweep of 8 policies x 2 capacities is 16 distinct lines
    where one palette of 12 colours would repeat."""
    policies = list(dict.fromkeys(str(r.get("policy")) for r in entries))
    caps = list(dict.fromkeys(r.get("capacity") for r in entries))
    out = []
    for r in entries:
        i = policies.index(str(r.get("policy")))
        inst = r.get("instance") if isinstance(r.get("instance"), int) else 0
        out.append({"color": PALETTE[i % len(PALETTE)], "symbol": POLICY_SYMBOLS[inst % len(POLICY_SYMBOLS)],
                    "dash": CAPACITY_DASHES[caps.index(r.get("capacity")) % len(CAPACITY_DASHES)],
                    "markers": isinstance(r.get("instance"), int)})
    return out


def _replay_line(name: str, xs, ys, style: dict) -> dict:
    trace = _policy_trace(name, xs, ys, style)
    trace["mode"] = "lines+markers" if style.get("markers") else "lines"
    trace["line"]["dash"] = style["dash"]
    return trace


def _verdict_table(verdict) -> Table | None:
    """`policy replay --json`'s `verdict` (docs/policy-results.md): per SLO, the replays meeting
    it and which has the highest prefix hit ratio and which the least memory; the saturated ones."""
    if not isinstance(verdict, dict) or not isinstance(verdict.get("targets"), dict):
        return None
    t = verdict["targets"]

    def who(p):
        if not isinstance(p, dict):
            return None
        return f"{p.get('policy')} at {p.get('capacity'):,} blocks (prefix hit {p.get('prefix_hit_ratio'):.4f})"

    rows = []
    for key, label in (("both", "both targets"), ("ttft", f"TTFT P99 <= {t.get('ttft_p99_ms'):,.0f} ms"),
                       ("tpot", f"TPOT P99 <= {t.get('tpot_p99_ms'):,.0f} ms")):
        pick = verdict.get(key) if isinstance(verdict.get(key), dict) else {}
        rows.append([label, f"{pick.get('meeting', 0)} of {verdict.get('replays')}", who(pick.get("highest_hit")),
                     who(pick.get("least_memory"))])
    saturated = [s for s in verdict.get("saturated") or [] if isinstance(s, dict)]
    caption = ("Saturated (their figures describe a backlog): "
               + "; ".join(f"{s.get('policy')} at {s.get('capacity'):,} ({s.get('why')})" for s in saturated) + "."
               if saturated else "No replay was saturated.")
    defaults = verdict.get("defaults") or {}
    if defaults.get("ttft_p99_ms") or defaults.get("tpot_p99_ms"):
        caption += f" Default targets: {defaults.get('source')}."
    return Table(["SLO", "replays meeting it", "highest prefix hit", "least memory"], rows,
                 title="Verdict (serving replay)", caption=caption)


def _routing_tables(routing) -> list:
    """`policy replay --instances N`'s aggregate rows (docs/serving-routing.md), one per (policy, capacity)."""
    if not isinstance(routing, dict) or not isinstance(routing.get("aggregate"), list):
        return []
    rows = [[a.get("policy"), a.get("capacity"), a.get("ttft_p50_ms"), a.get("ttft_p99_ms"),
             a.get("queue_wait_p99_ms"), a.get("requests_per_s"), a.get("prefix_hit_ratio"),
             a.get("router_match_ratio"), a.get("imbalance"), a.get("preemptions")]
            for a in routing["aggregate"] if isinstance(a, dict)]
    return [Table(["policy", "pool per instance (blocks)", "TTFT P50 (ms)", "TTFT P99 (ms)", "queue wait P99 (ms)",
                   "requests/s", "prefix hit ratio (pooled)", "router match ratio", "imbalance", "preemptions"],
                  rows, title=f"Serving replay: {routing.get('instances')} instances, {routing.get('routing')} "
                              "routing (all requests)")]


_BEHAVIOUR_LEVEL = {"lirs": 0, "recency": 1, "scan": 2}


def _replay_sits(entries) -> tuple[list, list]:
    """SITS decisions of the serving replays that ran -p sits: a table and, per replay, the
    behaviour serving each window beside the window's P99 TTFT, switches and rollbacks marked."""
    rows, figs = [], []
    for r in entries:
        x = r.get("sits")
        if not isinstance(x, dict):
            continue
        events = [e for e in x.get("events") or [] if isinstance(e, dict)]
        th = x.get("threshold") if isinstance(x.get("threshold"), dict) else None
        switch = next((e for e in events if e.get("event") == "switch"), None)
        share = x.get("behaviour_share") or {}
        rows.append([r.get("policy"), r.get("capacity"), x.get("window_s"), x.get("decided_windows"),
                     x.get("switches"), ", ".join(f"{k} {100 * float(v):.0f}%" for k, v in share.items()),
                     (switch or {}).get("time") if th else None, th.get("rollbacks") if th else None])
        decisions = [e for e in events if e.get("event") == "decision"]
        timeline = [w for w in x.get("timeline") or [] if isinstance(w, dict)]
        if not decisions or not timeline:
            continue
        name = f"{r.get('policy')} @ {r.get('capacity'):,}" if isinstance(r.get("capacity"), int) else "sits"
        data = [{"type": "scatter", "mode": "lines", "name": "window P99 TTFT (ms)",
                 "x": [e.get("time") for e in decisions], "y": [e.get("d_ms") for e in decisions], "yaxis": "y"},
                {"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": "#D55E00"},
                 "name": "behaviour serving the window (right axis)", "x": [w.get("time_s") for w in timeline],
                 "y": [_BEHAVIOUR_LEVEL.get(str(w.get("behaviour"))) for w in timeline], "yaxis": "y2"}]
        for kind, symbol in (("switch", "triangle-up"), ("rollback", "x"), ("breach", "circle-open")):
            marks = [e for e in events if e.get("event") == kind]
            if marks:
                data.append({"type": "scatter", "mode": "markers", "name": kind, "x": [e.get("time") for e in marks],
                             "y": [e.get("p99_ms", None) if kind == "breach" else 0 for e in marks], "yaxis": "y",
                             "marker": {"symbol": symbol, "size": 10}})
        layout = axis_titles("simulated time (s)", "P99 TTFT of the window's first tokens (ms)")
        # automargin: the right axis's labels ("recency", "scan") get the room they need, not 10 px
        layout["yaxis2"] = {"overlaying": "y", "side": "right", "showgrid": False, "range": [-0.3, 2.3],
                            "tickmode": "array", "tickvals": [0, 1, 2], "ticktext": ["lirs", "recency", "scan"],
                            "automargin": True, "title": {"text": "behaviour"}}
        # the legend under the plot: on the right it sat on the right axis's labels ("sca")
        layout["legend"] = {"orientation": "h", "x": 0, "xanchor": "left", "y": -0.22, "yanchor": "top"}
        layout["margin"] = {"b": 90}
        figs.append(Figure(f"SITS decisions (serving replay, {name})", data, layout, wide=True,
                           caption=f"One point per {x.get('window_s')} s window of simulated time with requests; "
                                   "the step line is the behaviour that served it (lirs before a threshold "
                                   "switch); circles are breaches, triangles the hot switch, crosses rollbacks."))
    if not rows:
        return [], []
    table = Table(["policy", "pool (blocks)", "window (s)", "decisions", "behaviour switches", "served",
                   "threshold switch at (s)", "rollbacks"], rows, title="SITS decisions (serving replay)")
    return [table], figs


def policy_section(payload: Any, source: str = "") -> Section:
    """Tables and plots from the policy engine's results (SimResult.to_dict rows).

    Accepts a list of result rows, or an object with `results` (rows), optional `p99` rows
    (policy, capacity, p99_ms ...), optional `curves` (hit-ratio curves, `policy mrc --json`)
    and optional `decisions` / `timeline` (SITS controller
    windows: t or window, policy/state, and any numeric columns such as entropy, p99_ms), with
    optional `decisions_capacity` (the capacity, in blocks, the decisions were taken at)).
    """
    if isinstance(payload, list):
        payload = {"results": payload}
    if not isinstance(payload, dict):
        raise ValueError("policy results must be a JSON list of results or an object with 'results'")
    results = payload.get("results") or []
    tables, figs = [], []
    if results:
        rows = []
        by_policy: dict[str, list[dict]] = {}
        for r in results:
            by_policy.setdefault(str(r.get("policy")), []).append(r)
            p99 = row_p99_ms(r)
            rows.append([r.get("policy"), r.get("capacity"), r.get("block_hit_ratio"), r.get("token_hit_ratio"),
                         r.get("prefix_hit_ratio"), r.get("evictions"), p99])
        tables.append(Table(["policy", "capacity (blocks)", "block hit ratio", "token hit ratio",
                             "prefix hit ratio", "evictions", "P99 estimate (ms)"], rows, title="Policy results"))
        # One colour and marker per policy, the same in both plots: with many policies colours
        # come close, and the markers tell them apart where lines meet.
        style = {policy: {"color": PALETTE[i % len(PALETTE)], "symbol": POLICY_SYMBOLS[i % len(POLICY_SYMBOLS)]}
                 for i, policy in enumerate(by_policy)}
        data, curves = [], {}
        for policy, rs in by_policy.items():
            rs = sorted(rs, key=lambda r: r.get("capacity") or 0)
            xs, ys = [r.get("capacity") for r in rs], [r.get("block_hit_ratio") for r in rs]
            curves.setdefault((tuple(xs), tuple(ys)), []).append(policy)
            data.append(_policy_trace(policy, xs, ys, style[policy]))
        same = [names for names in curves.values() if len(names) > 1]
        caption = " ".join(f"{' and '.join(names)} give the same hit ratio at every capacity: their lines coincide."
                           for names in same)
        figs.append(Figure("Hit ratio per capacity", data,
                           axis_titles("capacity (blocks)", "block hit ratio", xaxis={"type": "log"}),
                           caption=caption))
        p99_data = []
        for policy, rs in by_policy.items():
            pts = [(r.get("capacity"), row_p99_ms(r)) for r in rs]
            pts = sorted(p for p in pts if isinstance(p[1], (int, float)))
            if pts:
                p99_data.append(_policy_trace(policy, [p[0] for p in pts], [p[1] for p in pts], style[policy]))
        if p99_data:
            figs.append(Figure("P99 estimate per capacity", p99_data,
                               axis_titles("capacity (blocks)", "P99 time to first token (ms)",
                                            xaxis={"type": "log"})))
    curve_figure = _curve_figure(payload.get("curves"))
    if curve_figure is not None:
        figs.append(curve_figure)
    replay_tables, replay_figs = _replay_parts(payload.get("replay"))
    verdict = _verdict_table(payload.get("verdict"))
    if verdict is not None:  # the answer first
        tables.insert(0, verdict)
    tables.extend(_routing_tables(payload.get("routing")))
    tables.extend(replay_tables)
    figs.extend(replay_figs)
    timeline = payload.get("decisions") or payload.get("timeline") or []
    at = payload.get("decisions_capacity")
    if not timeline:  # `policy simulate --json`: the SITS rows carry their decisions as events
        timeline, at = decisions_from_rows(results)
    if timeline:
        tkey = next((k for k in ("time", "t", "t_s", "time_s", "window") if k in timeline[0]), None)
        xs = [row.get(tkey) for row in timeline] if tkey else list(range(len(timeline)))
        numeric = [k for k, v in timeline[0].items() if k != tkey and isinstance(v, (int, float))
                   and not isinstance(v, bool)]
        # Large-valued series (milliseconds) on the left axis, small ones (entropy, scores) on the right.
        big = {k for k in numeric if max(abs(float(row.get(k) or 0)) for row in timeline) > 10}
        data = [{"type": "scatter", "mode": "lines", "name": plot_text(k if k in big else f"{k} (right axis)", 60),
                 "x": xs, "y": [row.get(k) for row in timeline], "yaxis": "y" if k in big else "y3"}
                for k in numeric]
        state_key = next((k for k in ("policy", "state", "behaviour", "to", "action", "decision")
                          if k in timeline[0]), None)
        if state_key:
            states = [str(row.get(state_key)) for row in timeline]
            changes = [i for i in range(len(states)) if i == 0 or states[i] != states[i - 1]]
            data.append({"type": "scatter", "mode": "markers+text", "name": plot_text(state_key),
                         "x": [xs[i] for i in changes], "y": [0] * len(changes), "yaxis": "y2",
                         "text": [plot_text(states[i]) for i in changes], "textposition": "top center",
                         "marker": {"symbol": "triangle-up", "size": 10, "color": "#D55E00"}})
        layout = axis_titles(f"trace {tkey} (s)" if tkey in ("time", "t", "t_s", "time_s") else (tkey or "window"),
                              ", ".join(sorted(big)) or "value")
        layout["xaxis"]["anchor"] = "y2"
        layout["yaxis"]["domain"] = [0.25, 1.0]
        layout["yaxis2"] = {"domain": [0.0, 0.15], "showticklabels": False, "range": [-0.5, 1.5]}
        if len(big) < len(numeric):
            layout["yaxis3"] = {"overlaying": "y", "side": "right", "showgrid": False, "automargin": True,
                                "tickmode": "auto", "nticks": 6,
                                "title": {"text": plot_text(", ".join(k for k in numeric if k not in big), 80)}}
        layout["legend"] = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "xanchor": "left"}
        layout["margin"] = {"t": 60, "r": 60 if len(big) < len(numeric) else 10}
        caption = ("One point per controller window" + (f", at capacity {at:,} blocks" if isinstance(at, int) else "")
                   + ". Triangles mark the behaviour chosen at the first window and at each change.")
        figs.append(Figure("SITS decision timeline", data, layout, height=440, wide=True, caption=caption))
    intro = f"From {source}." if source else ""
    if not figs:
        intro += " The file held no results."
    return Section("Policy results", intro=intro.strip(), tables=tables, figures=figs)
