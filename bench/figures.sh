#!/usr/bin/env bash
# Regenerate the README's accuracy figures from their commands (never by hand) after a modelling change, and
# print each one's summary line: the validations (A100 single node, weak scaling, Megatron-Core MoE on H100
# and Blackwell, torchtitan), the component-table fits (GEMMs, collectives, attention over lengths, FP8 recipes),
# the block-scaled GEMM ratio, and the measured H200 iterations (profile path, bench/h200_measured.py), then
# with --cv the cross-validations, the leave-one-source-out calibration, its interval table and their plot
# (vtrain/data/intervals.json, docs/intervals.png).
#   usage: bash bench/figures.sh            about 4 minutes on the 2-core VM
#          bash bench/figures.sh --cv       and the cross-validations (bench/cv_a100.py, task=calibrate
#                                           calibrate.scope=all: much longer)
# Each command's whole output is kept in outputs/figures/<name>.log; the run stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
CV=0
for arg in "$@"; do
  case "$arg" in
    --cv) CV=1 ;;
    *) echo "bench/figures.sh: unknown argument $arg (only --cv)" >&2; exit 2 ;;
  esac
done
LOGS=outputs/figures
mkdir -p "$LOGS"

step() {  # name, grep pattern of the summary lines, command...
  local name=$1 pattern=$2
  shift 2
  echo "== $name: $*"
  "$@" >"$LOGS/$name.log" 2>&1 || { echo "bench/figures.sh: $name failed; see $LOGS/$name.log" >&2; exit 1; }
  grep -E "$pattern" "$LOGS/$name.log" || echo "   (no summary line; see $LOGS/$name.log)"
}

V=(-m vtrain task=validate tracking=off)
step a100_single_node '^MAPE' "$PY" "${V[@]}" +cluster=vtrain_a100 validate.data=a100_single_node \
  hydra.run.dir="$LOGS/a100_single_node"
step weak_scaling 'MAPE' "$PY" bench/weak_scaling.py
step moe_h100 '^MAPE' "$PY" "${V[@]}" +cluster=h100x1024 validate.data=megatron_moe_qwen3_h100 \
  hydra.run.dir="$LOGS/moe_h100"
step moe_blackwell '^MAPE' "$PY" "${V[@]}" +cluster=gb200_nvl72x16 validate.data=megatron_moe_qwen3_blackwell \
  hydra.run.dir="$LOGS/moe_blackwell"
step torchtitan '^MAPE|^peak memory' "$PY" "${V[@]}" +cluster=h100x1024 validate.data=torchtitan \
  hydra.run.dir="$LOGS/torchtitan"
step torchtitan_table 'H100 rows' "$PY" bench/torchtitan_table.py
step fit_gemm 'in sample|effective eta' "$PY" bench/fit_gemm.py
step fit_collectives 'all four collectives' "$PY" bench/fit_collectives.py
step fit_attention_length 'k0 = |held out' "$PY" bench/fit_attention_length.py
step fit_block_scaled 'block_scaled_gemm_ratio = |fitted$' "$PY" bench/fit_block_scaled.py
step h200_measured 'MAPE' "$PY" bench/h200_measured.py
step h200_llama_measured 'MAPE' "$PY" bench/h200_measured.py --profile profiles/measured/h200-llama
if [ "$CV" = 1 ]; then
  step cv_a100 'MAPE' "$PY" bench/cv_a100.py --max-evals 60
  # one calibration of every constant, leave-one-source-out; refits the interval table (docs/calibration.md)
  step calibrate_all '^  (pooled|interval)|^wrote' "$PY" -m vtrain task=calibrate calibrate.scope=all tracking=off \
    calibrate.write=true hydra.run.dir="$LOGS/calibrate_all"
  step intervals '^wrote' "$PY" bench/fit_intervals.py "$LOGS/calibrate_all/predictions.csv" --plot docs/intervals.png
  # the README and docs/calibration.md accuracy tables from its sources.csv (tests/test_readme_figures.py)
  step readme_figures 'rewritten' "$PY" bench/readme_figures.py "$LOGS/calibrate_all/sources.csv"
fi
echo "figures: done; compare with the README and update the lines that moved (git diff shows the data files)"
