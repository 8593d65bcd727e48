"""Service-level objectives over serving replays: which (policy, capacity) meets a P99 target.

`policy replay` prints a table of figures; what a serving engineer wants first is the answer:
which policy and pool size meet the latency targets, with the highest prefix hit ratio or the
least KV memory, and which replays were saturated (their figures describe a backlog, not the
policy). `verdict(rows, ttft_p99_ms, tpot_p99_ms)` gives that per SLO, as a dict that goes into
the document (`verdict`), the CLI's lines under the table and the top of the report.

Defaults: TTFT P99 <= 2,000 ms and TPOT P99 <= 200 ms, MLPerf Inference's server-scenario
latency constraints for Llama-2-70B (the size of the default model preset, qwen2-72b).

Saturated: a replay whose engine could not keep up, so its latencies measure a backlog that
grows with the trace's length rather than the policy: requests rejected (larger than the pool),
the pool too small for the requests in flight (preemptions: recompute), or completions short of
the arrivals (finished requests per second over the replay, `requests_per_s`, below
SATURATED_SHARE of the arriving rate, `offered_requests_per_s`: the engine still drained a
backlog long after the last arrival). Bursts that queue for a while but drain (the README's
Mooncake replay at 0.25x: 0.848 finished of 0.850 arriving a second) are not saturation; they
show in the TTFT. A row that carries its own `saturated` flag (a later engine check) is taken
at its word.
"""
from __future__ import annotations

import math

__all__ = [
    "DEFAULTS_SOURCE",
    "DEFAULT_TPOT_P99_MS",
    "DEFAULT_TTFT_P99_MS",
    "SATURATED_SHARE",
    "offered_rate",
    "saturation",
    "verdict",
    "verdict_lines",
]

#: MLPerf Inference (v4.0+) Llama-2-70B server scenario: TTFT P99 2 s, TPOT P99 200 ms.
DEFAULT_TTFT_P99_MS = 2000.0
DEFAULT_TPOT_P99_MS = 200.0
DEFAULTS_SOURCE = "MLPerf Inference Llama-2-70B server latency constraints"
#: Finished requests per second under this share of the arriving rate: saturated (the drain
#: after the last arrival is the backlog; 10% leaves room for the last requests' own latency).
SATURATED_SHARE = 0.9


def offered_rate(arrival) -> float:
    """Requests arriving per second over the arrivals' span (`offered_requests_per_s` of a replay
    row; arrival times in s, a closed loop's +inf ones left out)."""
    import numpy as np

    finite = np.asarray(arrival, dtype=float)
    finite = finite[np.isfinite(finite)]
    span = float(finite.max() - finite.min()) if len(finite) > 1 else 0.0
    return len(finite) / span if span > 0 else float("nan")


def _finite(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def saturation(row: dict) -> str:
    """Why `row` is saturated, in a few words ("" when it is not)."""
    if row.get("saturated") is False:
        return ""
    why = []
    if row.get("rejected"):
        why.append(f"{row['rejected']:,} rejected")
    if row.get("preemptions"):
        why.append(f"{row['preemptions']:,} preemptions")
    done, offered = _finite(row.get("requests_per_s")), _finite(row.get("offered_requests_per_s"))
    if done is not None and offered and done < SATURATED_SHARE * offered:
        why.append(f"{done:.3g} requests/s finished of {offered:.3g} arriving")
    if not why and row.get("saturated"):
        why.append((row.get("saturation") or {}).get("why") or "saturated")
    return ", ".join(why)


def _meets(row: dict, key: str, target: float) -> bool:
    v = _finite(row.get(key))
    return v is not None and v <= target


def _pick(rows: list[dict]) -> dict:
    """Among rows meeting an SLO: the highest prefix hit ratio (ties: less memory) and the least
    memory (ties: the higher hit ratio), as names."""
    def name(r):
        return {"policy": r["policy"], "capacity": int(r["capacity"]),
                "prefix_hit_ratio": float(r["prefix_hit_ratio"]),
                "ttft_p99_ms": _finite(r.get("ttft_p99_ms")), "tpot_p99_ms": _finite(r.get("tpot_p99_ms"))}

    if not rows:
        return {"meeting": 0, "highest_hit": None, "least_memory": None}
    best = max(rows, key=lambda r: (r["prefix_hit_ratio"], -r["capacity"]))
    least = min(rows, key=lambda r: (r["capacity"], -r["prefix_hit_ratio"]))
    return {"meeting": len(rows), "highest_hit": name(best), "least_memory": name(least)}


def verdict(rows: list[dict], ttft_p99_ms: float | None = None, tpot_p99_ms: float | None = None) -> dict:
    """Per SLO (`ttft`, `tpot`, `both`): how many replays meet it and which with the highest
    prefix hit ratio and the least memory; a saturated replay never meets an SLO. `saturated`
    names the saturated rows and why. Targets None take the defaults (`defaults` says which)."""
    ttft = DEFAULT_TTFT_P99_MS if ttft_p99_ms is None else float(ttft_p99_ms)
    tpot = DEFAULT_TPOT_P99_MS if tpot_p99_ms is None else float(tpot_p99_ms)
    rows = [r for r in rows if isinstance(r, dict)]
    saturated = []
    ok = []
    for r in rows:
        why = saturation(r)
        if why:
            saturated.append({"policy": r["policy"], "capacity": int(r["capacity"]), "why": why})
        else:
            ok.append(r)
    meets_ttft = [r for r in ok if _meets(r, "ttft_p99_ms", ttft)]
    meets_tpot = [r for r in ok if _meets(r, "tpot_p99_ms", tpot)]
    both = [r for r in meets_ttft if _meets(r, "tpot_p99_ms", tpot)]
    out = {
        "targets": {"ttft_p99_ms": ttft, "tpot_p99_ms": tpot},
        "defaults": {"ttft_p99_ms": ttft_p99_ms is None, "tpot_p99_ms": tpot_p99_ms is None,
                     "source": DEFAULTS_SOURCE},
        "replays": len(rows),
        "ttft": _pick(meets_ttft), "tpot": _pick(meets_tpot), "both": _pick(both),
        "saturated": saturated,
    }
    out["lines"] = verdict_lines(out, width=None)  # the report shows them as the CLI prints them
    return out


def _who(pick: dict | None) -> str:
    return f"{pick['policy']} at {pick['capacity']:,} blocks (prefix hit {pick['prefix_hit_ratio']:.4f})"


def verdict_lines(v: dict, width: int | None = 100) -> list[str]:
    """The verdict as lines of at most `width` characters (the CLI prints them under the table;
    the report at its top); a long line wraps, indented under its start."""
    t = v["targets"]
    said = [k for k in ("ttft_p99_ms", "tpot_p99_ms") if v["defaults"].get(k)]
    head = (f"verdict: TTFT P99 <= {t['ttft_p99_ms']:,.0f} ms, TPOT P99 <= {t['tpot_p99_ms']:,.0f} ms"
            + (f" (default{'s' if len(said) > 1 else ''}: {v['defaults']['source']}; --slo-ttft-p99, "
               "--slo-tpot-p99 to change)" if said else ""))
    lines = [head]
    for key, label in (("both", "both targets"), ("ttft", "TTFT P99 alone"), ("tpot", "TPOT P99 alone")):
        p = v[key]
        if not p["meeting"]:
            lines.append(f"  {label}: no replay meets it")
            continue
        text = f"  {label}: {p['meeting']} of {v['replays']} meet it; highest hit {_who(p['highest_hit'])}"
        if p["least_memory"] != p["highest_hit"]:
            text += f"; least memory {_who(p['least_memory'])}"
        lines.append(text)
    if v["saturated"]:
        lines.append("  saturated, their figures describe a backlog (why: --json's verdict): "
                     + ", ".join(f"{s['policy']} at {s['capacity']:,}" for s in v["saturated"]))
    if width is None:
        return lines
    import textwrap

    return [part for line in lines
            for part in textwrap.wrap(line, width, subsequent_indent=" " * (len(line) - len(line.lstrip()) + 4),
                                      break_on_hyphens=False)]
