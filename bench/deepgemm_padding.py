"""What-if, not shipped: vLLM 0.12.0's padded DeepGEMM MoE priced into the Qwen3-235B-A22B-FP8 rows'
replayed TPOT (docs/VALIDATION.md, "The rows' vLLM versions").

vLLM 0.12.0 runs a block-fp8 MoE below MoE TP 8 through DeepGEMM for every batch, over
``M_sum = round_up(M * top_k + E_local * 127, 128)`` rows with the padding marked expert 0, so
every row is computed (fused_moe/deep_gemm_utils.py:26-44 and 369-374 in the 0.12.0 wheel);
0.13.0 marks it -1 and DeepGEMM skips it. This prices the two grouped GEMMs of a decode step
(M = the concurrency) at aiconfigurator-core's measured H200 DeepGEMM block-fp8 GEMM of the same
M_sum, N and K (a dense GEMM standing in for the grouped one: the assumption) and puts them in
place of the replay's MoE term (the profile's ``moe_ms`` at M tokens). Nothing is fitted: no
constant is chosen on the rows. Whether the runs' image had the ``deep_gemm`` package is not
recorded, which is why the replay does not do this.

    .venv/bin/sitsprof policy validate --silicon q235.csv --json > q235.json   # the Qwen3-235B vLLM rows
    .venv/bin/python bench/deepgemm_padding.py q235.json \\
        .../aiconfigurator_core/systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
MODEL = "Qwen/Qwen3-235B-A22B-FP8"
HIDDEN, INTER, EXPERTS, TOP_K, LAYERS = 4096, 1536, 128, 8, 94  # its config.json
ALIGN = 128  # DeepGEMM's M alignment for the contiguous layout


def gemm_ms(table, m: int, n: int, k: int) -> float:
    """The measured DeepGEMM block-fp8 GEMM at (m, n, k): linear in m and k between grid points, n on the grid."""
    t = table[(table.kernel_source == "DeepGemmFp8BlockScaledMMKernel") & (table.n == n)]
    if t.empty:
        raise SystemExit(f"no DeepGEMM GEMM with n={n} in the table")

    def at_m(mm):
        row = t[t.m == mm].sort_values("k")
        return float(np.interp(k, row.k.to_numpy(), row.latency.to_numpy()))

    ms = np.sort(t.m.unique())
    lo, hi = ms[ms <= m].max(), ms[ms >= m].min()
    return at_m(lo) if lo == hi else float(np.interp(m, [lo, hi], [at_m(lo), at_m(hi)]))


def main(validate_json: str, gemm_parquet: str) -> None:
    table = pq.read_table(gemm_parquet).to_pandas()
    table = table[table.gemm_dtype == "fp8_block"]
    profiles = json.loads((ROOT / "policies" / "data" / "op_profiles.json").read_text())
    grid = profiles["grid_tokens"]
    out = []
    for r in json.loads(Path(validate_json).read_text())["rows"]:
        if r["model"] != MODEL or r.get("predicted_tpot_ms") is None or r["backend_version"] != "0.12.0":
            continue
        tp, m = r["tp"], r["concurrency"]
        key = re.search(r"per-op profile: [^,]*, (\S+);", r["latency_model"]).group(1)  # the profile it ran
        ep = int(key.rsplit("|ep", 1)[1]) if "|ep" in key else 1
        experts, n_inter = EXPERTS // ep, INTER * ep // tp  # EP: whole experts; TP: each expert split
        m_sum = -(-(m * TOP_K + experts * (ALIGN - 1)) // ALIGN) * ALIGN
        padded = LAYERS * (gemm_ms(table, m_sum, 2 * n_inter, HIDDEN) + gemm_ms(table, m_sum, HIDDEN, n_inter))
        moe = float(np.interp(m, grid, profiles["profiles"][key]["moe_ms"]))
        what_if = r["predicted_tpot_ms"] - moe + padded
        out.append((tp, r["measured_tpot_ms"], r["predicted_tpot_ms"], what_if))
        print(f"TP {tp} EP {ep} c {m:3d} {r['isl']}/{r['osl']}: measured {r['measured_tpot_ms']:.1f} ms, replay "
              f"{r['predicted_tpot_ms']:.1f} (its MoE {moe:.1f}), padded DeepGEMM {padded:.1f} -> {what_if:.1f}")
    for tp in sorted({o[0] for o in out}):
        o = [x for x in out if x[0] == tp]

        def med(i, o=o):
            return 100 * float(np.median([abs(x[i] / x[1] - 1) for x in o]))

        def over(i, o=o):
            return sum(max(x[i] / x[1], x[1] / x[i]) > 2 for x in o)

        print(f"TP {tp}, {len(o)} rows: median |TPOT| replay {med(2):.1f}% -> what-if {med(3):.1f}%; "
              f"> 2x {over(2)} -> {over(3)}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
