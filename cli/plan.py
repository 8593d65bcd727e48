"""`sitsprof policy plan TRACE`: the fewest replicas that serve TRACE within a latency SLO.

The same options as `policy replay` (the engine, the model, the pool per replica, the
arrivals, the routing between replicas) plus the targets; the search itself is
policies/serving/plan.py. Built by `make_plan_cmd(replay_cmd, replay_config)` from the replay
command's own options, so the two cannot drift apart.
"""
from __future__ import annotations

import click

from .console import emit_json, load_trace

__all__ = ["make_plan_cmd"]

#: replay options that make no sense for a search over replica counts
_LEFT_OUT = {"instances", "concurrency", "isl", "osl", "requests", "trace_path", "quiet"}


def make_plan_cmd(replay_cmd: click.Command, replay_config) -> click.Command:
    def plan(trace_path, max_instances, **options) -> None:
        """Replay TRACE on 1, 2, 4, ... replicas behind the router until the aggregate TTFT P99 and
        TPOT P99 meet the targets with no replica saturated, then bisect to the fewest; prints
        every step."""
        from dataclasses import replace

        from sitsprof.policies.errors import ServingReplayError
        from sitsprof.policies.serving.plan import fewest_instances, step_lines
        from sitsprof.policies.serving.routing import RouterSettings, check_routing, routed_document
        from sitsprof.policies.serving.slo import DEFAULT_TPOT_P99_MS, DEFAULT_TTFT_P99_MS

        from .replaying import extras

        config = replay_config(**options)
        text, caps = options["policy_text"], options["capacity_text"]
        if "," in text or text.strip().lower() == "all" or (caps is not None and "," in caps):
            raise ServingReplayError("policy plan searches one policy at one pool per replica; give one -p and at "
                                     "most one -c")
        routing = check_routing(1, options.get("routing") or "round-robin")
        router = RouterSettings(ttl_s=options["router_ttl"], load_window_s=options["load_window"],
                                balance_abs=options["balance_abs"], balance_rel=options["balance_rel"],
                                cache_threshold=options["cache_threshold"]).checked()
        trace, fmt = load_trace(trace_path, options["fmt"], options["skip_bad_lines"])

        def evaluate(n: int) -> dict:
            doc = routed_document(trace, trace_path, fmt, replace(config, instances=n, routing=routing, router=router))
            (agg,) = doc["routing"]["aggregate"]
            return agg

        def show(step: dict) -> None:
            click.echo(f"sitsprof: plan: {step['instances']} instance(s): "
                       + ("meets" if step["meets"] else f"misses ({step['why']})"), err=True)

        given = extras()  # --slo-ttft-p99 / --slo-tpot-p99 (ms), replay's own options (cli/replaying.py)
        result = fewest_instances(evaluate, given.get("slo_ttft_p99") or DEFAULT_TTFT_P99_MS,
                                  given.get("slo_tpot_p99") or DEFAULT_TPOT_P99_MS, max_instances, on_step=show)
        if options["as_json"]:
            emit_json({"plan": result, "engine": config.engine_fields(), "routing": routing})
            return
        for line in step_lines(result):
            click.echo(line)

    params = [p for p in replay_cmd.params if p.name not in _LEFT_OUT]
    params.insert(0, click.Argument(["trace_path"], metavar="TRACE"))
    params += [  # --slo-ttft-p99 / --slo-tpot-p99 (ms) come with replay's options
        click.Option(["--max-instances"], type=click.IntRange(min=1), default=64, show_default=True,
                     help="Stop the search here."),
    ]
    return click.Command("plan", callback=plan, params=params, help=plan.__doc__,
                         short_help="The fewest replicas that meet a TTFT/TPOT P99 SLO on a trace.")
