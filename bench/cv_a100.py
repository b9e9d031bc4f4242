"""Cross-validated (held-out) predictions of the jointly fitted A100 constants, the residuals that
bench/fit_intervals.py turns into the prediction intervals of the fitted regime.

    python bench/cv_a100.py [--jobs 2] [--max-evals 120]   # ~25 min on 2 cores

The fit is the default A100 calibration (task=calibrate, calibrate.fit_on=joint: the 1,440 single-node
runs and the 10 Megatron-LM weak-scaling rows, each set's MAPE weighted equally; the constants of
vtrain/calibration/fit.py FITTED). Two cross-validations, each fold a full refit (Nelder-Mead from the
shipped constants, ``--max-evals`` evaluations, as task=calibrate does):

- single-node rows: leave one (t, d, p) shape out (18 folds; calibrate.folds=shape), weak-scaling rows in;
- weak-scaling rows: leave one row out (10 folds; calibrate.folds=weak_scaling), single-node rows in.

Writes vtrain/data/intervals/a100_cv_predictions.csv: dataset, row (1-based), fold, measured_s,
in_sample_s (shipped constants), held_out_s (the fold's refit). The folds start from the shipped optimum,
which saw the held-out rows: with a bounded number of evaluations the held-out errors can only be
somewhat optimistic, which the nested coverage check in bench/fit_intervals.py measures.
"""
from __future__ import annotations

import csv
import datetime
import functools
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np

from vtrain.io.args import ArgumentParser, int_at_least

OUT = Path(__file__).resolve().parents[1] / "vtrain" / "data" / "intervals" / "a100_cv_predictions.csv"
STACK = "megatron_deepspeed_2022"  # validation/datasets.py SHIPPED_STACK["a100_single_node"]


@functools.lru_cache(maxsize=1)
def _data() -> Tuple[Any, ...]:
    from vtrain.calibration.fit import Constants, Dataset
    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig
    from vtrain.validation.datasets import single_node_workloads, weak_scaling_workloads
    from vtrain.validation.weak_scaling import weak_scaling_cluster

    cluster = load_group_config("cluster", "vtrain_a100", ClusterConfig)
    single, single_s, _ = single_node_workloads(cluster, None, STACK)
    weak, weak_s, _ = weak_scaling_workloads(weak_scaling_cluster(str(cluster.gpu)))
    datasets = [Dataset("single_node", single, single_s), Dataset("weak_scaling", weak, weak_s)]
    return datasets, Constants.of(single[0])


def fold_label(dataset: int, w: Any, index: int) -> str:
    if dataset == 0:
        return f"shape=({w.plan.tp},{w.plan.dp},{w.plan.pp})"
    return f"row={index + 1}"


def run_fold(task: Tuple[int, str, int]) -> Tuple[int, str, List[int], List[float]]:
    """Refit without fold ``label`` of dataset ``target``; predict the held-out rows."""
    from vtrain.calibration.fit import Dataset, fit_constants, predict_s

    target, label, max_evals = task
    datasets, base = _data()
    d = datasets[target]
    labels = [fold_label(target, w, i) for i, w in enumerate(d.workloads)]
    test = [i for i, g in enumerate(labels) if g == label]
    train = [i for i, g in enumerate(labels) if g != label]
    train_ds = [Dataset(d.name, [d.workloads[i] for i in train], d.measured_s[train], d.weight)]
    train_ds += [x for i, x in enumerate(datasets) if i != target]
    fit = fit_constants(train_ds, base, max_evals=max_evals)
    pred = predict_s([d.workloads[i] for i in test], base.with_values(fit.constants))
    return target, label, test, [float(p) for p in pred]


def main() -> None:
    from vtrain.calibration.fit import predict_s

    ap = ArgumentParser()
    ap.add_argument("--jobs", type=int_at_least(1), default=2)
    ap.add_argument("--max-evals", type=int_at_least(1), default=120)
    args = ap.parse_args()
    datasets, base = _data()
    tasks = []
    for t, d in enumerate(datasets):
        for label in sorted({fold_label(t, w, i) for i, w in enumerate(d.workloads)}):
            tasks.append((t, label, args.max_evals))
    held = [np.full(len(d.workloads), np.nan) for d in datasets]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for n, (t, label, test, pred) in enumerate(pool.map(run_fold, tasks), start=1):
            held[t][test] = pred
            print(f"[{n}/{len(tasks)}] {datasets[t].name} {label}: {len(test)} rows", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as fh:
        fh.write(f"# bench/cv_a100.py --max-evals {args.max_evals}, {datetime.date.today().isoformat()}: "
                 "held-out predictions of the joint A100 fit (leave-one-shape-out single-node, "
                 "leave-one-row-out weak scaling)\n")
        w = csv.writer(fh)
        w.writerow(["dataset", "row", "fold", "measured_s", "in_sample_s", "held_out_s"])
        for t, d in enumerate(datasets):
            ins = predict_s(d.workloads, base)
            for i, wl in enumerate(d.workloads):
                w.writerow([d.name, i + 1, fold_label(t, wl, i), f"{d.measured_s[i]:.6g}", f"{ins[i]:.6g}",
                            f"{held[t][i]:.6g}"])
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
