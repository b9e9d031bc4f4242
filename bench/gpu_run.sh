#!/usr/bin/env bash
# Profile one H200 (gpu config `h200`) and check vtrain's profile-driven predictions against real
# single-GPU training iterations. Writes profiles/measured/h200/gemm_scaled.csv (bf16, per-tensor, rowwise and
# blockwise FP8 GEMMs side by side: the FP8 recipes' efficiency, bench/fit_gemm.py), profiles/measured/h200/
# {meta.json,ops.csv} and profiles/measured/h200/validation.csv (one row per configuration: predicted_s,
# measured_s, error), and profiles/measured/h200/attention_lengths.csv (SDPA over sequence lengths: the fused-
# attention rate, bench/fit_attention.py), and profiles/measured/h200/sustained_gemm.csv (one GEMM in a burst and
# sustained, with clock and power). Needs a CUDA build of torch; takes about 4 minutes on an H200
# (FP8 recipes < 1 min, attention < 1 min, sustained GEMMs ~1 min, profile ~1 min, 6 measured configurations
# ~10-20 s each; 2 min 45 s in all on 2026-12-04 without the sustained step).
#   usage: bash bench/gpu_run.sh            (PYTHON=... to pick the interpreter)
# On the lent machine (no Hydra there): `bash bench/device_site.sh` here first, then the one call its header
# gives. Where $OUT is set (that machine), profiles/measured/h200/ is copied under it after each step and at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=profiles/measured/h200
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"  # bench/fit_gemm.py imports vtrain from this checkout
save() {  # on the lent machine: what exists so far comes back even if a later step is killed
  if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/h200" && cp "$DEST"/*.csv "$DEST"/*.json "$OUT/h200/" 2>/dev/null || true; fi
}
trap save EXIT
# The base model: GPT (learned positions, LayerNorm, GeLU, vocab 51200) with head_dim 128; the sweep
# scales hidden (heads = hidden/128, ffn = 4 hidden) and covers every shape measured below.
BASE=(+model=gpt_1_7b +cluster=h200x8 model.hidden_size=2048 model.num_heads=16 model.max_seq_len=4096
      training.precision=bf16 training.flash_attention=true profile.device=cuda profile.dtype=bf16)

"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "bench/gpu_run.sh: no CUDA device")'
mkdir -p "$DEST" && rm -f "$DEST/validation.csv"

# FP8 recipes first (the shortest step, and the one no shipped table has): 143 shapes x 6 kernels. A failure
# here is reported and the profile goes on.
if "$PY" -m vtrain.profiler.scaled_gemm --gpu h200 --out "$DEST" --grid all; then
  "$PY" bench/fit_gemm.py --scaled "$DEST/gemm_scaled.csv" | sed -n '/FP8 recipes side by side/,/^$/p' ||
    echo "bench/gpu_run.sh: the FP8 fit failed; run it here: python bench/fit_gemm.py --scaled $DEST/gemm_scaled.csv"
else
  echo "bench/gpu_run.sh: the FP8 recipes step failed; going on with the profile"
fi
save

# Fused attention (SDPA's flash kernel, as torchtitan runs it, and cuDNN's) over 2K-128K tokens and ring-step blocks
if "$PY" -m vtrain.profiler.attention_lengths --gpu h200 --out "$DEST"; then
  "$PY" bench/fit_attention.py --table "$DEST/attention_lengths.csv" ||
    echo "bench/gpu_run.sh: the attention fit failed; run it here: python bench/fit_attention.py"
  "$PY" bench/fit_attention.py --table "$DEST/attention_lengths.csv" --backend cudnn --stack megatron_core_te || true
else
  echo "bench/gpu_run.sh: the attention step failed; going on with the profile"
fi
save

# One GEMM in a burst (the tables' way) and back to back for 8 s (a training step's way), with clock and power
if ! "$PY" -m vtrain.profiler.sustained_gemm --gpu h200 --out "$DEST"; then
  echo "bench/gpu_run.sh: the sustained-GEMM step failed; going on with the profile"
fi
save

"$PY" -m vtrain task=profile "${BASE[@]}" profile.out_dir="$DEST" \
  'profile.hidden_sizes=[2048,4096,8192]' 'profile.micro_batch_sizes=[1,2,4,8]' 'profile.seq_lens=[2048,4096]' \
  'profile.attention=[flash]' 'profile.adam_layers=[1,8,16,32]' profile.warmup=2 profile.repeats=5 \
  hydra.run.dir=outputs/gpu_run/profile
save

# layers hidden micro-batch seq: sizes that fit one 141 GB GPU with bf16 weights, grads and Adam states
for cfg in "8 2048 1 2048" "16 2048 8 2048" "32 2048 4 4096" "16 4096 2 2048" "32 4096 1 4096" "8 8192 2 2048"; do
  read -r L H B S <<<"$cfg"
  "$PY" -m vtrain task=measure "${BASE[@]}" model.num_layers="$L" model.hidden_size="$H" \
    model.num_heads=$((H / 128)) parallelism.micro_batch_size="$B" training.seq_len="$S" \
    cost.profile_dir="$DEST" profile.warmup=2 profile.measure_iterations=5 profile.grad_accum_steps=2 \
    profile.validation_csv="$DEST/validation.csv" hydra.run.dir="outputs/gpu_run/measure_${L}_${H}_${B}_${S}"
done
save
"$PY" - "$DEST/validation.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
errs = [abs(float(r["error"])) for r in rows]
for r in rows:
    print(f"L={r['num_layers']:>2} h={r['hidden_size']:>4} mb={r['micro_batch_size']} s={r['seq_len']}: "
          f"predicted {float(r['predicted_s'])*1e3:8.1f} ms  measured {float(r['measured_s'])*1e3:8.1f} ms  "
          f"error {float(r['error']):+.1%}")
print(f"MAPE {100 * sum(errs) / len(errs):.1f}% over {len(rows)} configurations -> {sys.argv[1]}")
PY
