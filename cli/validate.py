"""`sitsprof policy replay --concurrency N` (a closed-loop workload) and `sitsprof policy validate`.

Wiring only: the workload is `sitsprof.policies.serving.workload`, the silicon table
`...serving.silicon`, the validation `...serving.validate`.
"""
from __future__ import annotations

import click

from .console import load_trace

__all__ = ["closed_loop_source", "validate_cmd", "validate_table"]


def closed_loop_source(trace_path, fmt, skip_bad_lines, concurrency, isl, osl, requests, block_tokens, instances):
    """(trace, reblocked, path, fmt) of `policy replay`'s closed loop: the synthetic ISL/OSL
    source without TRACE, else TRACE's requests in file order; a bad combination is one line."""
    from sitsprof.policies.errors import ServingReplayError
    from sitsprof.policies.serving import workload

    if concurrency is None:
        raise ServingReplayError("--isl, --osl and --requests shape a closed-loop workload: add --concurrency N")
    if instances is not None:
        raise ServingReplayError("--concurrency drives one engine; drop --instances (or replay a trace's arrivals)")
    if trace_path is None:
        if isl is None or osl is None:
            raise ServingReplayError("--concurrency without a TRACE replays a synthetic workload: give --isl and "
                                     "--osl (--isl 1024 --osl 128)")
        trace, rb = workload.synthetic(concurrency, isl, osl, requests, block_tokens)
        return trace, rb, "closed-loop", "synthetic"
    if isl is not None or osl is not None:
        raise ServingReplayError("--isl/--osl make a synthetic workload; with a TRACE its own prompts are used "
                                 "(drop TRACE or --isl/--osl)")
    from sitsprof.policies.serving.reblock import reblock

    trace, fmt = load_trace(trace_path, fmt, skip_bad_lines)
    rb = reblock(trace, block_tokens)
    if requests is not None:
        raise ServingReplayError("--requests sizes the synthetic workload; a TRACE's requests are all replayed")
    return trace, workload.closed_loop(rb, concurrency), trace_path, fmt


def _ms(v) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:+.0f}%"


def validate_table(doc: dict):
    from rich.table import Table

    s = doc["summary"]
    table = Table(title=f"policy validate: {s['matched']} of {s['rows']} silicon rows replayed "
                        f"(calibration {doc['calibration']}, {doc['step_model']} step model)")
    for name in ("model", "system", "tp", "prec", "isl/osl", "conc", "TTFT ms", "replay", "err", "AIC", "err",
                 "TPOT ms", "replay", "err", "AIC", "err"):
        table.add_column(name, justify="left" if name in ("model", "system", "prec") else "right")
    for r in doc["rows"]:
        if "reason" in r:
            continue
        table.add_row(r["model"], r["system"], str(r["tp"]), r["precision"] or "-", f"{r['isl']}/{r['osl']}",
                      str(r["concurrency"]), _ms(r["measured_ttft_ms"]), _ms(r["predicted_ttft_ms"]),
                      _pct(r["ttft_error"]), _ms(r["aic_ttft_ms"]), _pct(r["aic_ttft_error"]),
                      _ms(r["measured_tpot_ms"]), _ms(r["predicted_tpot_ms"]), _pct(r["tpot_error"]),
                      _ms(r["aic_tpot_ms"]), _pct(r["aic_tpot_error"]))

    def m(v):
        return "-" if v is None else f"{100 * v:.1f}%"

    table.caption = (f"median |error| TTFT {m(s['median_abs_ttft_error'])}, TPOT {m(s['median_abs_tpot_error'])} "
                     f"over {s['matched']} rows; worst ratio {s['worst_ratio'] or 0:.2f}x. "
                     f"On the {s['both_rows']} rows "
                     f"AIConfigurator also estimates: replay TTFT {m(s['median_abs_ttft_error_both'])}, TPOT "
                     f"{m(s['median_abs_tpot_error_both'])}; AIConfigurator TTFT {m(s['aic_median_abs_ttft_error'])}, "
                     f"TPOT {m(s['aic_median_abs_tpot_error'])}")
    return table


@click.command("validate")
@click.option("--silicon", "silicon_path", default=None, metavar="FILE",
              help="The silicon table (aiconfigurator-core's systems/silicon_sample.csv; default: the installed "
                   "aiconfigurator-core's, the aiconfigurator extra).")
@click.option("--calibration", default=None,
              help="Calibration JSON for the step model (default: the shipped hopper-published reference).")
@click.option("--aic", "aic_path", default=None, metavar="FILE",
              help="AIConfigurator's estimates by row id (default: the shipped policies/data/aic_estimates.csv, "
                   "made by bench/aic_estimates.py).")
@click.option("--step-model", type=click.Choice(["profiled", "roofline"]), default="profiled", show_default=True,
              help="profiled: the measured per-op profiles (policies/data/op_profiles.json; rows without one are "
                   "listed as not replayed); roofline: latency.py's roofline for every row.")
@click.option("--seed", default=0, show_default=True, help="Seed of the step model's sampled re-fetch delays.")
@click.option("--backend", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True,
              help="Which engine's rows to replay: vllm (vLLM's mixed batches and admission), or sglang "
                   "(SGLang's prefill-alone batches, chunk size and memory rule, its per-op tables: "
                   "policies/serving/sglang_validate.py).")
@click.option("--json", "as_json", is_flag=True, help="Print {'rows': [...], 'summary': {...}}.")
def validate_cmd(silicon_path, calibration, aic_path, step_model, seed, backend, as_json) -> None:
    """Replay every vLLM aggregated H100/H200 run of NVIDIA's silicon table as it ran (a closed loop of
    its concurrency, its ISL/OSL, model, precision, TP and system) and compare TTFT and TPOT with the
    measured ones and with AIConfigurator's estimates; rows that cannot be replayed are listed with why."""
    from sitsprof.policies.serving.silicon import read_silicon
    from sitsprof.policies.serving.validate import selected, validate

    from .console import emit_json, stdout_console

    doc = validate(selected(read_silicon(silicon_path), backend=backend), calibration=calibration, aic_path=aic_path,
                   seed=seed, step_model=step_model, backend=backend)
    if as_json:
        emit_json(doc)
        return
    console = stdout_console()
    console.print(validate_table(doc))
    for r in doc["rows"]:
        if "reason" in r:
            click.echo(f"not replayed: {r['model']} {r['system']} tp{r['tp']} {r['isl']}/{r['osl']} "
                       f"c{r['concurrency']}: {r['reason']}")
