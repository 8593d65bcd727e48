"""AIConfigurator's own estimates of the silicon table's vLLM aggregated H100/H200 rows.

Run in a SEPARATE environment that has aiconfigurator-core 0.12.0 installed (its SDK is not a
sitsprof dependency), e.g.

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator-core==0.12.0
    /tmp/aic/bin/python bench/aic_estimates.py > policies/data/aic_estimates.csv
    /tmp/aic/bin/python bench/aic_estimates.py sglang | tail -n +2 >> policies/data/aic_estimates.csv

(the second line adds the SGLang rows, `policy validate --backend sglang`: the same point on the
SGLang backend's perf database, the row's version when the wheel has it, else its newest, 0.5.14).

For each row: the row's model path, system, TP, the quantization modes the row names
(gemm_quant_mode, moe_quant_mode; empty -> the checkpoint's default), the vLLM backend's
perf database (the row's version when the wheel has it, else its newest), and one
`BaseBackend.run_agg` point at batch size = the row's concurrency, ISL/OSL the row's, and
ctx_tokens 8192 (vLLM's default max_num_batched_tokens on H100/H200); two model paths read
the wheel's config of the same architecture (CONFIG_ALIASES). Output: id,
aic_ttft_ms, aic_tpot_ms, aic_note (empty when the estimate ran; the exception otherwise).
`policy validate` reads the file; the project never imports the SDK.
"""
from __future__ import annotations

import csv
import sys
from importlib.resources import files

CTX_TOKENS = 8192
#: model paths of the table whose config.json the wheel ships under another name (same architecture;
#: the precision comes from the row's quant modes); `policy validate` uses the same map
CONFIG_ALIASES = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
                  "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
                  "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B"}
#: the newest perf database version the wheel ships per backend (the fallback when a row's is absent)
NEWEST = {"vllm": "0.24.0", "sglang": "0.5.14"}


def main(argv=None) -> int:
    import contextlib
    import io
    import logging

    logging.disable(logging.CRITICAL)
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database

    argv = sys.argv[1:] if argv is None else argv
    engine = argv[0] if argv else "vllm"
    table = files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
    rows = [r for r in csv.DictReader(table.open(newline=""))
            if r["backend"] == engine and r["mode"] == "agg" and r["system"] in ("h100_sxm", "h200_sxm")]
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["id", "aic_ttft_ms", "aic_tpot_ms", "aic_note"])
    dbs = {}
    for r in rows:
        # a fresh backend a row: its run_agg cache is keyed by (isl, osl, batch, ctx_tokens), not by model or system
        backend = get_backend(engine)
        try:
            key = (r["system"], r["backend_version"])
            if key not in dbs:
                db = None
                if r["backend_version"]:
                    with contextlib.suppress(Exception):
                        db = get_database(r["system"], engine, r["backend_version"])
                dbs[key] = db or get_database(r["system"], engine, NEWEST[engine])
            db = dbs[key]
            kw = {"tp_size": int(r["tp_size"] or 1), "pp_size": int(r["pp_size"] or 1)}
            if r["gemm_quant_mode"]:
                kw["gemm_quant_mode"] = common.GEMMQuantMode[r["gemm_quant_mode"]]
            if r["moe_quant_mode"]:
                kw["moe_quant_mode"] = common.MoEQuantMode[r["moe_quant_mode"]]
            if r["moe_tp_size"]:
                kw["moe_tp_size"] = int(r["moe_tp_size"])
            if r["moe_ep_size"]:
                kw["moe_ep_size"] = int(r["moe_ep_size"])
            if r["attention_dp_size"]:
                kw["attention_dp_size"] = int(r["attention_dp_size"])
            with contextlib.redirect_stdout(io.StringIO()):
                path = CONFIG_ALIASES.get(r["model_path"], r["model_path"])
                model = get_model(path, ModelConfig(**kw), engine)
                rc = RuntimeConfig(batch_size=int(r["batch_size"]), isl=int(r["isl"]), osl=int(r["osl"]))
                s = backend.run_agg(model, db, rc, ctx_tokens=CTX_TOKENS)
            d = s.get_result_dict()
            out.writerow([r["id"], repr(float(d["ttft"])), repr(float(d["tpot"])), ""])
        except Exception as e:  # noqa: BLE001 - a row the SDK cannot estimate is reported, not fatal
            out.writerow([r["id"], "", "", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"])
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
