"""Cross-validated (held-out) predictions of the jointly fitted A100 constants, the residuals that
bench/fit_intervals.py turns into the prediction intervals of the fitted regime.

    python bench/cv_a100.py [--jobs 2] [--max-evals 120]   # ~25 min on 2 cores
    python bench/cv_a100.py --folds hidden_size --max-evals 150   # ~10 min on 2 cores

The fit is the default A100 calibration (task=calibrate, calibrate.fit_on=joint: the 1,440 single-node
runs and the 10 Megatron-LM weak-scaling rows, each set's MAPE weighted equally; the constants of
vtrain/calibration/fit.py FITTED). Two cross-validations, each fold a full refit (Nelder-Mead from the
shipped constants, ``--max-evals`` evaluations, as task=calibrate does):

- single-node rows: leave one (t, d, p) shape out (18 folds; calibrate.folds=shape), weak-scaling rows in;
- weak-scaling rows: leave one row out (10 folds; calibrate.folds=weak_scaling), single-node rows in.

``--folds hidden_size`` runs instead the cross-validation of ``task=calibrate +cluster=vtrain_a100
calibrate.folds=hidden_size`` (single-node rows, leave one hidden size out: 2 folds, weak-scaling rows in; that
task refits each fold with max(60, extra.max_evals // 2) = 150 evaluations) and writes
vtrain/data/intervals/a100_cv_hidden_size.csv, single-node rows only, same columns.

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
OUT_HIDDEN = OUT.with_name("a100_cv_hidden_size.csv")
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


def fold_label(dataset: int, w: Any, index: int, folds: str = "shape") -> str:
    if dataset == 0 and folds == "hidden_size":
        return f"hidden={w.model.hidden_size}"
    if dataset == 0:
        return f"shape=({w.plan.tp},{w.plan.dp},{w.plan.pp})"
    return f"row={index + 1}"


def run_fold(task: Tuple[int, str, int, str]) -> Tuple[int, str, List[int], List[float]]:
    """Refit without fold ``label`` of dataset ``target``; predict the held-out rows."""
    from vtrain.calibration.fit import Dataset, fit_constants, predict_s

    target, label, max_evals, folds = task
    datasets, base = _data()
    d = datasets[target]
    labels = [fold_label(target, w, i, folds) for i, w in enumerate(d.workloads)]
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
    ap.add_argument("--folds", choices=["shape_and_row", "hidden_size"], default="shape_and_row",
                    help="hidden_size: task=calibrate calibrate.folds=hidden_size's folds, to a100_cv_hidden_size.csv")
    args = ap.parse_args()
    datasets, base = _data()
    targets = [0] if args.folds == "hidden_size" else list(range(len(datasets)))
    folds = "hidden_size" if args.folds == "hidden_size" else "shape"
    tasks = []
    for t in targets:
        for label in sorted({fold_label(t, w, i, folds) for i, w in enumerate(datasets[t].workloads)}):
            tasks.append((t, label, args.max_evals, folds))
    held = [np.full(len(d.workloads), np.nan) for d in datasets]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for n, (t, label, test, pred) in enumerate(pool.map(run_fold, tasks), start=1):
            held[t][test] = pred
            print(f"[{n}/{len(tasks)}] {datasets[t].name} {label}: {len(test)} rows", flush=True)
    out = OUT_HIDDEN if args.folds == "hidden_size" else OUT
    what = ("leave-one-hidden-size-out single-node, weak scaling always in" if args.folds == "hidden_size"
            else "leave-one-shape-out single-node, leave-one-row-out weak scaling")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        fh.write(f"# bench/cv_a100.py --folds {args.folds} --max-evals {args.max_evals}, "
                 f"{datetime.date.today().isoformat()}: held-out predictions of the joint A100 fit ({what})\n")
        w = csv.writer(fh)
        w.writerow(["dataset", "row", "fold", "measured_s", "in_sample_s", "held_out_s"])
        for t in targets:
            d = datasets[t]
            ins = predict_s(d.workloads, base)
            for i, wl in enumerate(d.workloads):
                w.writerow([d.name, i + 1, fold_label(t, wl, i, folds), f"{d.measured_s[i]:.6g}", f"{ins[i]:.6g}",
                            f"{held[t][i]:.6g}"])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
