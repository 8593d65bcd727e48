"""Prometheus metrics of policy runs, and the same figures as plain JSON.

Per (policy, capacity) result, labelled ``policy`` and ``capacity``:

- ``semantic_cache_hit_ratio``: block hit ratio of the run;
- ``shard_eviction_rate``: evictions per second of trace time (a classic policy is one shard);
- ``cross_tenant_cache_contamination_index`` (CTCCI, see tenancy.py) and ``ctcci_alert``
  (1 when the index reaches the alert threshold for the run's tenant count);
- ``ttft_p99_seconds``: the cost model's P99 time to first token;
- ``sits_behaviour_switches``: SITS behaviour changes (SITS runs only).

`serve` exposes them over HTTP on the bounded server of `sitsprof.common.httpserve` (bounded
threads, idle connections closed, a listen backlog of 128), bound to 127.0.0.1 unless told
otherwise. prometheus-client is imported lazily.
"""
from __future__ import annotations

from ..errors import PolicyEngineError

__all__ = [
    "DEFAULT_ADDR",
    "DEFAULT_PORT",
    "METRICS",
    "build_registry",
    "exposition",
    "result_metrics",
    "serve",
]

DEFAULT_PORT = 9464
DEFAULT_ADDR = "127.0.0.1"
METRICS = {
    "semantic_cache_hit_ratio": "Block hit ratio of the replay",
    "shard_eviction_rate": "Evictions per second of trace time",
    "cross_tenant_cache_contamination_index": "Hits served from another tenant's entries / all accesses (CTCCI)",
    "ctcci_alert": "1 when CTCCI reaches its alert threshold for the tenant count",
    "ttft_p99_seconds": "P99 time to first token from the cost model",
    "sits_behaviour_switches": "Behaviour switches made by the SITS controller",
}


def result_metrics(result, trace_seconds: float) -> dict:
    """The metric values of one SimResult (absent figures are left out)."""
    extra = result.extra or {}
    out = {"semantic_cache_hit_ratio": float(result.block_hit_ratio)}
    rate = extra.get("shard_eviction_rate")
    if rate is None:
        rate = result.evictions / trace_seconds if trace_seconds > 0 else 0.0
    out["shard_eviction_rate"] = float(rate)
    tenancy = extra.get("tenancy")
    if tenancy:
        out["cross_tenant_cache_contamination_index"] = float(tenancy["ctcci"])
        out["ctcci_alert"] = 1.0 if tenancy["alert"] else 0.0
    cost = extra.get("cost")
    if cost and cost.get("ttft_p99_ms") is not None:
        out["ttft_p99_seconds"] = float(cost["ttft_p99_ms"]) / 1e3
    if "switches" in extra:
        out["sits_behaviour_switches"] = float(extra["switches"])
    return out


def build_registry(results, trace_seconds: float):
    """A fresh CollectorRegistry holding one gauge per metric, one sample per result."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    gauges = {name: Gauge(name, help_text, ["policy", "capacity"], registry=registry)
              for name, help_text in METRICS.items()}
    for result in results:
        for name, value in result_metrics(result, trace_seconds).items():
            gauges[name].labels(policy=result.policy, capacity=str(result.capacity)).set(value)
    return registry


def exposition(registry) -> str:
    """The registry in Prometheus text format."""
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


def serve(registry, port: int = DEFAULT_PORT, addr: str = DEFAULT_ADDR):
    """Serve `registry` over HTTP; returns (server, thread). Port 0 picks a free port."""
    from sitsprof.common.httpserve import start_metrics_server

    try:
        return start_metrics_server(registry, port, addr)
    except OSError as exc:
        raise PolicyEngineError(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}") from None
