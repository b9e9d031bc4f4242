"""Predicted vs published TFLOP/s per GPU for the Megatron-LM weak-scaling table (SC'21, Table 1).

    python bench/weak_scaling.py [gpu [stack]]   # gpu/, stack/ config names (default: a100_80gb,
                                                 # megatron_lm_2021)

Each row runs as the authors' script states it (micro-batch, interleaving, DDP implementation): see
vtrain/validation/weak_scaling.py.
"""
from __future__ import annotations

import sys

from vtrain.validation.datasets import data_path
from vtrain.validation.weak_scaling import predict, read_weak_scaling, weak_scaling_cluster


def main() -> None:
    cluster = weak_scaling_cluster(sys.argv[1] if len(sys.argv) > 1 else None)
    stack = sys.argv[2] if len(sys.argv) > 2 else None
    print("| model | GPUs | (t,p,d) | mb | chunks | published TFLOP/s | predicted | error |")
    print("|---|---|---|---|---|---|---|---|")
    errors = []
    for row in read_weak_scaling(data_path("megatron_2021_weak_scaling.csv")):
        r = predict(row, cluster, stack)
        errors.append(abs(r.error_pct))
        dp = row.num_gpus // (row.tp * row.pp)
        print(f"| {row.model} | {row.num_gpus} | ({row.tp},{row.pp},{dp}) | {r.micro_batch} | {r.chunks} | "
              f"{row.published_tflops:.0f} | {r.predicted_tflops:.0f} | {r.error_pct:+.1f}% |")
    print(f"\nMAPE {sum(errors) / len(errors):.2f}%, max {max(errors):.1f}%, "
          f"{sum(e <= 10 for e in errors)}/{len(errors)} rows within ±10%")


if __name__ == "__main__":
    main()
