#!/usr/bin/env bash
# The device check: one call on a lent (shared) H200 that leaves the card as it found it.
#
#   bash probes/device_check.sh            # run it (from anywhere; it works in the repository root)
#   bash probes/device_check.sh --dry-run  # print the steps and their time budgets; change nothing
#
# It changes no clocks, power limit, MIG layout or persistence mode: the card belongs to
# someone else. The quick suite runs with `--clocks none`, the GPU tests run with
# SITSPROF_ALLOW_CLOCK_CHANGES unset (so the clock-lock test skips), and nvidia-smi is only
# queried (its state is recorded before and after, and compared).
#
# Steps, each under its own `timeout`, stopping at the first hard failure (a soft one is
# recorded and the check goes on); the budgets add up to under 6 minutes. Results land in
# $OUT (default ./device-out): at most 8 files, none in a subfolder, the run as a tarball.
# Scratch (the venv, the run directory) goes to $DEVICE_CHECK_WORK (default ./.device-check).
#
# Python packages come from the ignored .whl/ folder, offline (`pip install --no-index
# --find-links .whl`). Measuring needs numpy, pandas, pyarrow, click, rich and nvidia-ml-py
# (the image has all six); cupti-python (PM sampling) is optional and comes from carried wheels;
# numba, jinja2, plotly, prometheus-client and pytest are installed when there, never required
# (tests/test_measuring_soft_deps.py runs the dry run and `probe figures` with them blocked).
# The exact wheels to carry (5, 27.8 MB) and the command that fetches them: docs/device-check.md.
set -u -o pipefail

DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: bash probes/device_check.sh [--dry-run]" >&2; exit 2 ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export ROOT=$PWD
export OUT=${OUT:-$ROOT/device-out}
export WORK=${DEVICE_CHECK_WORK:-$ROOT/.device-check}
export PY=${PYTHON:-python3}
export VPY=$WORK/venv/bin/python
export RUN_NAME=h200-quick
export PYTHONUNBUFFERED=1
LIMIT_S=360
# what nvidia-smi reports about the card's state (all of them long-standing query fields)
export SMI_STATE=index,name,uuid,pci.bus_id,driver_version,persistence_mode,mig.mode.current,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,clocks.applications.graphics,clocks.applications.memory,power.draw,power.limit,power.default_limit,enforced.power.limit,temperature.gpu
# the GPU's other processes (read only): a co-tenant would bend every latency, so it is recorded
export SMI_APPS=gpu_uuid,pid,process_name,used_memory
# the settings that must be the same after the check as before it
export SMI_SETTINGS=index,uuid,persistence_mode,mig.mode.current,clocks.applications.graphics,clocks.applications.memory,power.limit,enforced.power.limit

# the PM-sampling single-pass metric sets, through pmu.cupti_pm (cupti-python); the reason when unavailable
read -r -d '' PM_SETS_PY <<'PYEOF'
import json, sys
try:
    from sitsprof.pmu.cupti_pm import pm_sampling_sets
    out, rc = pm_sampling_sets(0), 0
except Exception as exc:  # noqa: BLE001 - reported, the check goes on
    out, rc = {"unavailable": f"{type(exc).__name__}: {exc}"}, 1
try:  # where CUPTI's nvperf libraries were loaded from (pmu/nvperf.py), or where it looked
    from sitsprof.pmu.nvperf import ensure_nvperf
    out["nvperf"] = ensure_nvperf().reason()
except Exception as exc:  # noqa: BLE001
    out["nvperf"] = f"{type(exc).__name__}: {exc}"
print(out["nvperf"])
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
sets = out.get("sets")
print(f"chip {out.get('chip')}: {len(sets)} single-pass sets: {', '.join(sets)}" if sets else json.dumps(out))
sys.exit(rc)
PYEOF
export PM_SETS_PY

NAMES=() BUDGETS=() KINDS=() CMDS=()
step() { NAMES+=("$1"); BUDGETS+=("$2"); KINDS+=("$3"); CMDS+=("$4"); }

step gpu-state 10 hard 'command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found on PATH: no NVIDIA driver on this node (or PATH lacks it); nothing can be checked"; exit 127; }
{ echo "# before the check"; nvidia-smi --query-gpu="$SMI_STATE" --format=csv; } | tee "$OUT/gpu-state.txt"
{ echo "# compute processes before the check"; nvidia-smi --query-compute-apps="$SMI_APPS" --format=csv || echo "(nvidia-smi could not list them)"; } | tee -a "$OUT/gpu-state.txt"
nvidia-smi --query-gpu="$SMI_SETTINGS" --format=csv,noheader > "$WORK/settings-before.csv"'

step install 45 hard '[ -x "$VPY" ] || { "$PY" -m venv --without-pip --system-site-packages "$WORK/venv" && "$VPY" -m pip --version >/dev/null 2>&1; } || { rm -rf "$WORK/venv"; "$PY" -m venv --system-site-packages "$WORK/venv"; } || { echo "$PY cannot make a venv (python3-venv missing?): set PYTHON to one that can"; exit 1; }
mkdir -p "$WORK/src/sitsprof" && for d in common calibration pmu probes collectors reports policies cli; do ln -sfn "$ROOT/$d" "$WORK/src/sitsprof/$d"; done
"$VPY" -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])" | { read -r site; echo "$WORK/src" > "$site/sitsprof-source.pth"; }
"$VPY" -m pip install -q --no-index --find-links "$ROOT/.whl" "numpy>=1.24" "pandas>=2.0" "pyarrow>=14" "click>=8.1" "rich>=13" nvidia-ml-py || { echo "measuring needs numpy, pandas, pyarrow, click, rich and nvidia-ml-py: one is neither installed nor in .whl/ (docs/device-check.md)"; exit 1; }
for p in $("$VPY" -c "import importlib.util as u; print(*(p for m, p in ((\"numba\", \"numba>=0.59\"), (\"jinja2\", \"jinja2>=3.1\"), (\"plotly\", \"plotly>=5.18\"), (\"prometheus_client\", \"prometheus-client>=0.19\"), (\"pytest\", \"pytest\")) if u.find_spec(m) is None))"); do "$VPY" -m pip install -q --no-index --find-links "$ROOT/.whl" "$p" >/dev/null 2>&1 || echo "optional $p: neither installed nor in .whl/ (not needed to measure)"; done
"$VPY" -m pip install -q --no-index --find-links "$ROOT/.whl" "cupti-python>=13.3" "nvidia-cuda-cupti==13.4.*" pyelftools || echo "cupti-python / nvidia-cuda-cupti 13.4 / pyelftools not in .whl/: the CUPTI checks will skip"
"$VPY" -c "import sitsprof.cli.main, pynvml, cupy; print(\"sitsprof from\", sitsprof.cli.main.__file__, \"- CuPy\", cupy.__version__)"'

step devices 15 hard '"$VPY" -m sitsprof.cli.main devices --json --counters > "$OUT/devices.json" && "$VPY" -c "import json, sys; d = json.load(open(sys.argv[1])); print(len(d), \"device(s):\", [e[\"name\"] for e in d])" "$OUT/devices.json"'

step pm-sets 15 soft '"$VPY" -c "$PM_SETS_PY" "$OUT/pm-sets.json"'

step gpu-tests 60 soft 'env -u SITSPROF_ALLOW_CLOCK_CHANGES "$VPY" -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_pmu_gpu.py tests/test_probes_gpu.py -k "not quick_suite" 2>&1 | tee "$OUT/gpu-tests.log" || exit 1
grep -Eq "[0-9]+ passed" "$OUT/gpu-tests.log" || { echo "no GPU test passed (all skipped: is the GPU visible?)"; exit 1; }'

step quick-suite 150 hard 'rm -rf "$WORK/runs/$RUN_NAME"; start=$(date +%s)
"$VPY" -m sitsprof.cli.main run --suite quick --clocks none --out "$WORK/runs" --name "$RUN_NAME" 2>&1 | tee "$OUT/run.log"; rc=$?
last=$(grep -v "^[[:space:]]*$" "$OUT/run.log" | tail -n 1)
echo "quick suite wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/run.log"
[ "$rc" = 0 ] || { echo "$last"; exit "$rc"; }'

step figures 15 soft '"$VPY" -m sitsprof.cli.main probe figures "$WORK/runs/$RUN_NAME" 2>&1 | tee "$OUT/figures.txt"'

# optional cross-check of the saturator against Nsight Compute, when ncu is on the node: DRAM bytes
# and L2 hit rate of its first (unthrottled, calibration) launch. `--clock-control none` always:
# ncu's default locks the clocks to base, which on a card that is not ours is a setting change.
# `--kill yes` ends the probe once that one launch is profiled; the lines go to figures.txt.
step ncu-check 20 soft 'command -v ncu >/dev/null || { echo "ncu not on PATH: no cross-check (optional)"; exit 0; }
ncu --clock-control none --kill yes --launch-count 1 --kernel-name regex:saturator_read --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum "$VPY" -m sitsprof.cli.main probe loaded --levels 2 --clocks none --gpm off --out "$WORK/ncu-runs" --name ncu-check > "$WORK/ncu.log" 2>&1; rc=$?
{ echo "# ncu cross-check (--clock-control none): saturator_read, first launch"; grep -E "saturator_read|dram__bytes_read|lts__t_sector_hit_rate|gpu__time_duration|==ERROR==|==WARNING==" "$WORK/ncu.log"; } | tee -a "$OUT/figures.txt"
grep -q "dram__bytes_read" "$WORK/ncu.log" || { echo "ncu gave no metrics (exit status $rc): $(grep -v "^[[:space:]]*$" "$WORK/ncu.log" | tail -n 1)"; exit 1; }'

# runs even after a hard failure, like the packing: the card's state after is always recorded
step state-after 10 always 'command -v nvidia-smi >/dev/null && [ -f "$WORK/settings-before.csv" ] || { echo "no state recorded before the check: nothing to compare"; exit 0; }
{ echo "# after the check"; nvidia-smi --query-gpu="$SMI_STATE" --format=csv; } | tee -a "$OUT/gpu-state.txt"
{ echo "# compute processes after the check"; nvidia-smi --query-compute-apps="$SMI_APPS" --format=csv || echo "(nvidia-smi could not list them)"; } | tee -a "$OUT/gpu-state.txt"
nvidia-smi --query-gpu="$SMI_SETTINGS" --format=csv,noheader > "$WORK/settings-after.csv"
if cmp -s "$WORK/settings-before.csv" "$WORK/settings-after.csv"; then echo "card settings unchanged ($SMI_SETTINGS)" | tee -a "$OUT/gpu-state.txt"
else { echo "CARD SETTINGS CHANGED ($SMI_SETTINGS):"; cat "$WORK/settings-before.csv" "$WORK/settings-after.csv"; } | tee -a "$OUT/gpu-state.txt"; exit 1; fi'

# runs even after a hard failure: whatever the run directory holds comes back
step pack 10 always 'if [ -d "$WORK/runs/$RUN_NAME" ]; then tar -czf "$OUT/$RUN_NAME.tar.gz" -C "$WORK/runs" "$RUN_NAME" && ls -l "$OUT/$RUN_NAME.tar.gz"; else echo "no run directory to pack"; fi'

TOTAL=0
for b in "${BUDGETS[@]}"; do TOTAL=$((TOTAL + b)); done

if [ "$DRY_RUN" = 1 ]; then
  echo "device check (dry run: nothing is run, installed or written)"
  echo "OUT=$OUT  DEVICE_CHECK_WORK=$WORK  PYTHON=$PY"
  echo "SMI_STATE (recorded before and after)=$SMI_STATE"
  echo "SMI_SETTINGS (must not change)=$SMI_SETTINGS"
  echo "SMI_APPS (compute processes, recorded before and after)=$SMI_APPS"
  printf 'PM_SETS_PY=\n%s\n' "$PM_SETS_PY" | sed 's/^/    : /'
  for i in "${!NAMES[@]}"; do
    printf 'step %d/%d %-12s budget %3d s  %-6s\n' "$((i + 1))" "${#NAMES[@]}" "${NAMES[$i]}" "${BUDGETS[$i]}" "${KINDS[$i]}"
    printf '%s\n' "${CMDS[$i]}" | sed 's/^/    | /'
  done
  echo "total budget: $TOTAL s (limit $LIMIT_S s)"
  [ "$TOTAL" -lt "$LIMIT_S" ] || { echo "the steps' budgets add up to $TOTAL s, over $LIMIT_S s"; exit 1; }
  exit 0
fi

mkdir -p "$OUT" "$WORK" || exit 1
# a rerun into the same $OUT replaces this script's own files and nothing else
rm -f "$OUT"/summary.txt "$OUT"/gpu-state.txt "$OUT"/devices.json "$OUT"/pm-sets.json "$OUT"/gpu-tests.log \
      "$OUT"/run.log "$OUT"/figures.txt "$OUT/$RUN_NAME.tar.gz"
SUMMARY=$OUT/summary.txt
say() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }

say "device check on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ): ${#NAMES[@]} steps, budget $TOTAL s"
t_start=$(date +%s)
stopped=""
for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]} budget=${BUDGETS[$i]} kind=${KINDS[$i]}
  if [ -n "$stopped" ] && [ "$kind" != always ]; then
    say "step $((i + 1))/${#NAMES[@]} $name: not run (stopped at $stopped)"
    continue
  fi
  # the whole check stays under LIMIT_S: a step gets its budget or what is left, if less
  left=$(( LIMIT_S - 3 * (${#NAMES[@]} - i) - ($(date +%s) - t_start) ))
  [ "$left" -lt "$budget" ] && budget=$(( left > 1 ? left : 1 ))
  say "== step $((i + 1))/${#NAMES[@]} $name ($kind, budget $budget s)"
  t0=$(date +%s)
  timeout -k 2 "$budget" bash -o pipefail -c "${CMDS[$i]}" > "$WORK/step.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  cat "$WORK/step.log"
  { echo "-- last lines:"; tail -n 12 "$WORK/step.log"; } >> "$SUMMARY"
  if [ "$rc" = 0 ]; then
    say "step $((i + 1)) $name: ok in $secs s"
    continue
  fi
  why="exit status $rc"
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after $budget s"
  last=$(grep -v '^[[:space:]]*$' "$WORK/step.log" | tail -n 1)
  if [ "$kind" = hard ]; then
    stopped="step $((i + 1)) $name"
    say "device check: STOPPED at step $((i + 1))/${#NAMES[@]} $name (hard failure, $why after $secs s): $last"
  else
    say "step $((i + 1)) $name: FAILED ($kind, $why after $secs s; the check goes on): $last"
  fi
done
files=$(find "$OUT" -type f | wc -l)
say "device check: $( [ -n "$stopped" ] && echo "stopped at $stopped" || echo "all steps run" ) in $(( $(date +%s) - t_start )) s; $files file(s) in $OUT"
[ -z "$stopped" ]
