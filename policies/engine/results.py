"""Policy results as files: the rows, their JSON and CSV forms, and the reader `report` uses.

One module owns the format on both sides, so what `sitsprof policy simulate --json`,
`sitsprof demo` and `report --policy-results` agree on is written down once
(docs/policy-results.md). Pure Python and json: `sitsprof.reports` imports this module and
must not pull in numba or the policies.

A JSON document is an object with ``"format": "sitsprof.policy-results"``,
``"format_version"`` and ``"results"`` (one row per replay, `SimResult.to_dict` plus
per-tenant hit ratios); the reader also takes what earlier versions wrote (no ``format``,
or a bare list of rows).
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from sitsprof.common.jsonin import JsonFileError, read_json_file

from ..errors import PolicyEngineError

__all__ = [
    "CSV_COST_COLUMNS",
    "CSV_LEFT_OUT",
    "DECISION_COLUMNS",
    "FORMAT",
    "FORMAT_VERSION",
    "REPLAY_KEYS",
    "PolicyResultsError",
    "check_results",
    "decision_windows",
    "decisions_from_rows",
    "document",
    "event_records",
    "flat_row",
    "read_results",
    "result_rows",
    "row_p99_ms",
    "rows_to_csv",
    "tenant_hit_ratios",
    "trace_summary",
]

FORMAT = "sitsprof.policy-results"
FORMAT_VERSION = 1


class PolicyResultsError(PolicyEngineError):
    """A policy results file that cannot be read back: names the file and the problem."""


def trace_summary(trace, path=None, fmt=None) -> dict:
    """What a reader made of a trace file, for output headers and JSON documents."""
    return {
        "path": str(path) if path is not None else trace.source,
        "format": fmt,
        "references": int(len(trace)),
        "requests": int(trace.n_requests),
        "distinct_blocks": int(trace.n_blocks),
        "tenants": list(trace.tenant_names),
        "skipped_lines": int(trace.skipped_lines),
        "skipped_examples": list(trace.skipped_examples),
    }


def tenant_hit_ratios(trace, request_hits, keep_empty: bool = False) -> dict[str, float]:
    """Block hit ratio of each named tenant (model stack) from per-request hits
    (`SimResult.request_hits`). A tenant with no references is left out, or 0.0 with
    `keep_empty` (for tables that want a column per tenant whatever the workload drew)."""
    if not trace.tenant_names:
        return {}
    offsets = trace.request_offsets
    req_tenant = trace.tenant[offsets[:-1]]
    refs = offsets[1:] - offsets[:-1]
    out = {}
    for code, name in enumerate(trace.tenant_names):
        mask = req_tenant == code
        total = int(refs[mask].sum())
        if total:
            out[name] = float(request_hits[mask].sum() / total)
        elif keep_empty:
            out[name] = 0.0
    return out


def result_rows(results, trace=None) -> list[dict]:
    """Flat rows (one per result) for JSON and CSV; per-tenant hit ratios where tenants are known."""
    rows = []
    for result in results:
        row = result.to_dict()
        if trace is not None:
            for name, ratio in tenant_hit_ratios(trace, result.request_hits).items():
                row[f"hit_ratio[{name}]"] = ratio
        rows.append(row)
    return rows


def document(results: list[dict], **fields) -> dict:
    """A versioned JSON document: the format marker, `fields` (e.g. trace, workload) and the rows."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION, **fields, "results": results}


#: CSV column -> (extra group, key) of a costed row: the cost model's figures and CTCCI as flat
#: columns. tokens/s is one request stream served back to back (no batching, no queueing): the
#: column name says so until a serving replay gives the real throughput.
CSV_COST_COLUMNS = (
    ("ttft_p50_ms", ("cost", "ttft_p50_ms")), ("ttft_p95_ms", ("cost", "ttft_p95_ms")),
    ("ttft_p99_ms", ("cost", "ttft_p99_ms")), ("ttft_mean_ms", ("cost", "ttft_mean_ms")),
    ("tokens_per_s_one_stream", ("cost", "tokens_per_s")), ("prefill_tokens_per_s", ("cost", "prefill_tokens_per_s")),
    ("ctcci", ("tenancy", "ctcci")), ("calibration", ("cost", "calibration")),
    ("calibration_kind", ("cost", "calibration_kind")), ("model", ("cost", "model")), ("miss", ("cost", "miss")),
)
#: extra keys the CSV leaves out: logs and nested documents (`--events FILE` writes the events).
CSV_LEFT_OUT = ("cost", "tenancy", "metrics", "events")


def _scalar(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def flat_row(row: dict) -> dict:
    """One result row as flat CSV columns: the row's own scalars, the cost model's figures
    (`CSV_COST_COLUMNS`), then `extra`'s scalars (parameters, switches, windows) and its dicts of
    scalars one level down as ``name.key``; lists and event logs are left out."""
    out = {k: v for k, v in row.items() if k != "extra" and _scalar(v)}
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    for column, (group, key) in CSV_COST_COLUMNS:
        source = extra.get(group)
        if isinstance(source, dict) and key in source and _scalar(source[key]):
            out[column] = source[key]
    for key, value in extra.items():
        if key in CSV_LEFT_OUT:
            continue
        name = key if key not in out else f"extra.{key}"
        if _scalar(value):
            out[name] = value
        elif isinstance(value, dict) and all(_scalar(v) for v in value.values()):
            out.update({f"{name}.{k}": v for k, v in value.items()})
    return out


def rows_to_csv(rows: list[dict]) -> str:
    """CSV text of result rows, one flat line each (`flat_row`); the header is the union of
    the columns in first-seen order."""
    flat = [flat_row(row) for row in rows]
    buffer = io.StringIO()
    fields: list[str] = []
    for row in flat:
        fields.extend(k for k in row if k not in fields)
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in flat:
        writer.writerow(row)
    return buffer.getvalue()


def event_records(rows: list[dict]):
    """Every logged event of the rows (`extra.events`: the adaptive policies' decisions,
    rebalances, switches), each with its row's policy and capacity: what `--events FILE` writes
    as JSON Lines."""
    for row in rows:
        extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
        for event in extra.get("events") or ():
            if isinstance(event, dict):
                yield {"policy": row.get("policy"), "capacity": row.get("capacity"), **event}


def row_p99_ms(row: dict):
    """A row's P99 TTFT estimate in ms, wherever its writer put it: ``p99_ms`` on the row or
    in ``extra`` (the demo's priced rows), or ``extra.cost.ttft_p99_ms`` (`policy simulate
    --json`, any costed sweep); None without one."""
    extra = row.get("extra") if isinstance(row.get("extra"), dict) else {}
    cost = extra.get("cost") if isinstance(extra.get("cost"), dict) else {}
    for value in (row.get("p99_ms"), extra.get("p99_ms"), cost.get("ttft_p99_ms")):
        if _is_number(value):
            return value
    return None


#: SITS decision-event fields -> the timeline's column names (as the demo's `decisions`).
DECISION_COLUMNS = {"time": "time", "d_ms": "window P99 TTFT (ms)", "H": "access entropy H (bits)",
                    "score": "migration score", "to": "behaviour"}


def decision_windows(events) -> list[dict]:
    """The SITS controller's decision events as timeline rows (`DECISION_COLUMNS`)."""
    return [{DECISION_COLUMNS[k]: e[k] for k in DECISION_COLUMNS if k in e}
            for e in events or () if isinstance(e, dict) and e.get("event") == "decision"]


def decisions_from_rows(rows: list[dict]) -> tuple[list[dict], int | None]:
    """(timeline, capacity) of a document without ``decisions``: the decision events of the
    SITS row at the middle of its capacities (as the demo picks), ([], None) when no row has any."""
    sits = sorted((r for r in rows if isinstance(r, dict) and r.get("policy") == "sits"
                   and decision_windows((r.get("extra") or {}).get("events") if isinstance(r.get("extra"), dict)
                                        else None)),
                  key=lambda r: r.get("capacity") or 0)
    if not sits:
        return [], None
    row = sits[len(sits) // 2]
    capacity = row.get("capacity")
    return decision_windows(row["extra"]["events"]), capacity if isinstance(capacity, int) else None


def check_results(payload: Any, where: str) -> Any:
    """`payload` as read from `where`, checked enough to render: a list of rows or an object
    with `results`, each row an object with at least `policy`; a `format` marker, when
    present, must be this one at a version this reader knows."""
    if not isinstance(payload, (list, dict)):
        raise PolicyResultsError(f"{where}: expected a list of policy results or an object with 'results'")
    if isinstance(payload, dict) and "format" in payload:
        if payload["format"] != FORMAT:
            raise PolicyResultsError(f"{where}: format {payload['format']!r} is not {FORMAT!r}")
        version = payload.get("format_version")
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
            raise PolicyResultsError(f"{where}: format_version {version!r} is not one this sitsprof reads "
                                     f"(1..{FORMAT_VERSION}); a newer sitsprof wrote it")
    rows = payload if isinstance(payload, list) else payload.get("results", [])
    if not isinstance(rows, list) or any(not isinstance(r, dict) or "policy" not in r for r in rows):
        raise PolicyResultsError(f"{where}: each policy result must be an object with at least 'policy' "
                                 "(as SimResult.to_dict writes)")
    for i, row in enumerate(rows):
        problem = _row_problem(row)
        if problem is not None:
            raise PolicyResultsError(f"{where}: results[{i}]: {problem} (as SimResult.to_dict writes)")
    if isinstance(payload, dict):
        for key in ("decisions", "timeline"):
            timeline = payload.get(key)
            if timeline is not None and (not isinstance(timeline, list)
                                         or any(not isinstance(w, dict) for w in timeline)):
                raise PolicyResultsError(f"{where}: {key} must be a list of objects, one per controller window")
            for j, window in enumerate(timeline or ()):
                for name, value in window.items():
                    if isinstance(value, float) and not math.isfinite(value):
                        raise PolicyResultsError(f"{where}: {key}[{j}].{name} is {value!r}, not a finite number")
        problem = _curves_problem(payload.get("curves"))
        if problem is not None:
            raise PolicyResultsError(f"{where}: {problem} (as `sitsprof policy mrc --json` writes)")
        problem = _replay_problem(payload.get("replay")) or _routing_problem(payload.get("routing"))
        if problem is not None:
            raise PolicyResultsError(f"{where}: {problem} (as `sitsprof policy replay --json` writes)")
    return payload


#: what every `replay` entry carries (docs/policy-results.md, "Serving replay")
REPLAY_KEYS = ("engine", "policy", "capacity", "ttft_p50_ms", "ttft_p99_ms", "block_hit_ratio", "prefix_hit_ratio")


def _replay_problem(replay) -> str | None:
    """What is wrong with the optional `replay` (serving-engine replays), or None."""
    if replay is None:
        return None
    if not isinstance(replay, list):
        return "replay must be a list of serving replays"
    for i, row in enumerate(replay):
        if not isinstance(row, dict):
            return f"replay[{i}] must be an object"
        for key in REPLAY_KEYS:
            if key not in row:
                return f"replay[{i}] has no {key!r}"
        if not isinstance(row["capacity"], int) or isinstance(row["capacity"], bool) or row["capacity"] < 1:
            return f"replay[{i}].capacity must be a block count >= 1"
        for key in ("block_hit_ratio", "prefix_hit_ratio"):
            v = row[key]
            if v is not None and (not _is_number(v) or not 0 <= v <= 1):
                return f"replay[{i}].{key} must be a ratio in [0, 1], got {str(v)[:40]!r}"
        cdf = row.get("ttft_cdf_ms", [])
        if not isinstance(cdf, list) or any(v is not None and not _is_number(v) for v in cdf):
            return f"replay[{i}].ttft_cdf_ms must be a list of numbers (ms at percentiles 0..100)"
        series = row.get("series", [])
        if not isinstance(series, list) or any(not isinstance(w, dict) or not _is_number(w.get("time_s"))
                                               for w in series):
            return f"replay[{i}].series must be a list of objects with time_s"
        problem = _sits_problem(row.get("sits"))
        if problem is not None:
            return f"replay[{i}].sits {problem}"
    return None


def _sits_problem(sits) -> str | None:
    """What is wrong with a replay entry's optional `sits` (the SITS controller's log), or None."""
    if sits is None:
        return None
    if not isinstance(sits, dict):
        return "must be an object (the SITS controller's windows and decisions) or null"
    events, timeline = sits.get("events", []), sits.get("timeline", [])
    if not isinstance(events, list) or any(not isinstance(e, dict) or not isinstance(e.get("event"), str)
                                           for e in events):
        return "events must be a list of objects with an event name"
    if not isinstance(timeline, list) or any(not isinstance(w, dict) or not _is_number(w.get("time_s"))
                                             or not isinstance(w.get("behaviour"), str) for w in timeline):
        return "timeline must be a list of objects with time_s and behaviour"
    return None


def _routing_problem(routing) -> str | None:
    """What is wrong with the optional `routing` (`policy replay --instances N`), or None."""
    if routing is None:
        return None
    if not isinstance(routing, dict):
        return "routing must be an object"
    n = routing.get("instances")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return "routing.instances must be an instance count >= 1"
    if routing.get("routing") not in ("round-robin", "prefix"):
        return f"routing.routing must be round-robin or prefix, got {str(routing.get('routing'))[:40]!r}"
    aggregate = routing.get("aggregate")
    if not isinstance(aggregate, list):
        return "routing.aggregate must be a list of aggregate rows"
    problem = _replay_problem(aggregate)
    return problem.replace("replay[", "routing.aggregate[", 1) if problem else None


def _curves_problem(curves) -> str | None:
    """What is wrong with the optional `curves` (hit-ratio curves), or None."""
    if curves is None:
        return None
    if not isinstance(curves, list):
        return "curves must be a list of curves"
    for i, curve in enumerate(curves):
        if not isinstance(curve, dict) or not isinstance(curve.get("policy"), str):
            return f"curves[{i}] must be an object with a policy name"
        points = curve.get("points")
        if not isinstance(points, list) or any(not isinstance(p, dict) for p in points):
            return f"curves[{i}].points must be a list of objects"
        for j, point in enumerate(points):
            capacity, ratio = point.get("capacity"), point.get("hit_ratio")
            if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
                return f"curves[{i}].points[{j}].capacity must be a block count >= 1, got {str(capacity)[:40]!r}"
            if not _is_number(ratio) or not 0 <= ratio <= 1:
                return f"curves[{i}].points[{j}].hit_ratio must be a ratio in [0, 1], got {str(ratio)[:40]!r}"
    return None


#: Row fields the report plots or tabulates, and what each must be when present.
_COUNTS = ("capacity", "references", "hits", "evictions", "max_resident", "requests")
_RATIOS = ("block_hit_ratio", "token_hit_ratio", "prefix_hit_ratio")
_FIGURES = ("seconds", "p50_ms", "p99_ms", "tokens_per_s")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _row_problem(row: dict) -> str | None:
    """What is wrong with one result row for rendering, or None."""
    policy = row["policy"]
    if not isinstance(policy, str) or not policy.strip():
        return f"policy must be a policy name, got {str(policy)[:40]!r}"
    extra = row.get("extra")
    if extra is not None and not isinstance(extra, dict):
        return f"extra must be an object, got {type(extra).__name__}"
    for name in _COUNTS:
        value = row.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63):
            return f"{name} must be a count (an integer >= 0), got {str(value)[:40]!r}"
    for name in _RATIOS:
        value = row.get(name)
        if value is not None and (not _is_number(value) or not 0 <= value <= 1):
            return f"{name} must be a ratio in [0, 1], got {str(value)[:40]!r}"
    for source in (row, extra or {}):
        for name in _FIGURES:
            value = source.get(name)
            if value is not None and (not _is_number(value) or not math.isfinite(value) or value < 0):
                return f"{name} must be a finite number >= 0, got {str(value)[:40]!r}"
    return None


def read_results(path: str | Path) -> Any:
    """The JSON a policy run wrote (`check_results`), or PolicyResultsError naming the file."""
    path = Path(path)
    try:
        payload = read_json_file(path)
    except JsonFileError as exc:
        raise PolicyResultsError(f"{path}: {exc.problem} (a policy results file is what "
                                 "`sitsprof policy simulate --json` writes)") from None
    return check_results(payload, str(path))
