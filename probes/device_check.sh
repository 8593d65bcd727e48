#!/bin/bash
# The probes' device check, in one call on a lent H200 (run from the repository root):
#   GPU tests, the quick suite into a run directory, and the figures issue 5 asks for.
# Results land in $OUT (or ./device-out): logs, figures.txt and the run as a tarball
# (the run folder itself is nested too deep to come back from the device tool).
set -o pipefail
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
timeout 240 python3 -m pytest -m gpu tests/test_probes_gpu.py -k "not quick_suite" -q -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log"
start=$(date +%s)
timeout 300 sitsprof run --suite quick --clocks max --out "$OUT/runs" --name h200-quick 2>&1 | tee "$OUT/run.log"
echo "quick suite wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/run.log"
sitsprof probe figures "$OUT/runs/h200-quick" 2>&1 | tee "$OUT/figures.txt"
tar -czf "$OUT/h200-quick.tar.gz" -C "$OUT/runs" h200-quick && rm -rf "$OUT/runs"
ls -la "$OUT"
