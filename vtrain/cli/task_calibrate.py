"""task=calibrate: fit the GPU's cost-model constants (calibrate.constants, default calibration.fit.FITTED) to
the shipped measurements (A100: the 1,440 single-node runs and the Megatron-LM weak-scaling table, equally
weighted; calibrate.fit_on=single_node fits the single-node runs alone and reports the weak-scaling rows out of
sample, calibrate.fit_on=weak_scaling the reverse), report in-sample and leave-one-group-out cross-validated
MAPE, and write the fitted constants (calibrate.write=true updates conf/gpu/<gpu>.yaml and conf/stack/<stack>.yaml
in place).

    python -m vtrain task=calibrate +cluster=vtrain_a100 calibrate.folds=hidden_size

calibrate.scope=all fits every GPU's and stack's constants on every shipped source at once, leave-one-source-out
(vtrain/cli/task_calibrate_all.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
from omegaconf import DictConfig

from vtrain.calibration.fit import (
    BOUNDS,
    FITTED,
    GPU_CONSTANTS,
    STACK_CONSTANTS,
    Constants,
    Dataset,
    at_bound,
    fit_constants,
    leave_one_group_out,
    mape_pct,
    predict_s,
    sensitivity,
)
from vtrain.cli.logs import say
from vtrain.config.compose import check_config_name, require_group
from vtrain.errors import ConfigError
from vtrain.validation.datasets import (
    SHIPPED_STACK,
    resolve_dataset,
    shipped_defaults,
    single_node_workloads,
    weak_scaling_workloads,
)
from vtrain.validation.metrics import summarise
from vtrain.validation.run import IMPLAUSIBLE_RATIO, check_plausible
from vtrain.validation.weak_scaling import weak_scaling_cluster
from vtrain.workload.fields import Domain, check_value

MAX_EVALS = Domain(lo=1, hi=1e6, integer=True)  # Nelder-Mead objective evaluations (+extra.max_evals)
FIT_ON = ("joint", "single_node", "weak_scaling")  # weak_scaling: the 10 rows alone, single-node out of sample
GROUPS = {
    "hidden_size": lambda w: w.model.hidden_size,
    "num_layers": lambda w: w.model.num_layers,
    "shape": lambda w: (w.plan.tp, w.plan.dp, w.plan.pp),
    "micro_batch": lambda w: w.plan.micro_batch_size,
}


def write_constants(group: str, name: str, constants: dict) -> Path:
    """Update ``<group>/<name>.yaml`` in place where it lives (the shipped configs or a ``--config-dir``), one
    ``key: value`` line per constant."""
    path = check_config_name(group, name)
    text = path.read_text()
    for key, value in constants.items():
        line = f"{key}: {value:.4g}"
        text, n = re.subn(rf"^{key}: .*$", line, text, flags=re.M)
        if n == 0:
            text = text.rstrip("\n") + "\n" + line + "\n"
    path.write_text(text)
    return path


def constant_table(datasets: List[Dataset], fitted: Constants, constants: Dict[str, float],
                   folds_fit: List[Dict[str, float]]) -> Dict[str, Dict[str, object]]:
    """Print and return, per constant: value, bounds, whether it sits near a bound (fit.at_bound), the
    change of the fit's error when it alone moves -10% / +10% (2 simulations of every row per constant),
    and its range over the cross-validation folds' refits. The constants of BOUNDS not in ``constants``
    follow as "fixed" rows (their config value and sensitivity: why they are not fitted)."""
    fixed = [k for k in BOUNDS if k not in constants]
    sens = sensitivity(datasets, fitted, [*constants, *fixed])
    say(f"  {'constant':<28} {'value':>10} {'bounds':>19} {'near bound':>10} {'dMAPE -10%':>10} {'+10%':>7} "
        f"{'over ' + str(len(folds_fit)) + ' CV folds' if folds_fit else 'CV folds':>22}")
    out: Dict[str, Dict[str, object]] = {}
    for k in [*constants, *fixed]:
        v = constants[k] if k in constants else fitted.value(k)
        lo, hi = BOUNDS[k]
        fv = [f[k] for f in folds_fit if k in f]
        spread = "fixed (not fitted)" if k in fixed else f"{min(fv):.4g} .. {max(fv):.4g}" if fv \
            else "(calibrate.folds=none)"
        bound = "" if k in fixed else at_bound(k, v)
        minus, plus = sens[k]
        say(f"  {k:<28} {v:>10.4g} {'[' + f'{lo:.3g}, {hi:.3g}' + ']':>19} {bound or '-':>10} {minus:>+9.2f}pp "
            f"{plus:>+6.2f}pp {spread:>22}")
        out[k] = {"value": v, "bounds": [lo, hi], "fitted": k not in fixed, "at_bound": bound or None,
                  "delta_mape_pp_minus_10pct": minus, "delta_mape_pp_plus_10pct": plus,
                  "cv_fold_min": min(fv) if fv else None, "cv_fold_max": max(fv) if fv else None,
                  "cv_fold_std": float(np.std(fv)) if fv else None}
    return out


def fitted_names(cfg: DictConfig) -> List[str]:
    """calibrate.constants (names of BOUNDS), or fit.FITTED when unset."""
    names = cfg.calibrate.get("constants")
    if names is None:
        return list(FITTED)
    names = [str(n) for n in names] if not isinstance(names, str) else [n for n in names.split(",") if n]
    unknown = [n for n in names if n not in BOUNDS]
    if unknown or not names:
        raise ConfigError(f"calibrate.constants={','.join(unknown) or '[]'} must name constants among "
                          f"{', '.join(BOUNDS)}")
    return list(dict.fromkeys(names))


def _plausible(single: List[Any], measured_s: np.ndarray, rows: List[Any], base: Constants
               ) -> Tuple[List[Any], np.ndarray]:
    """The rows whose measurement is within IMPLAUSIBLE_RATIO of the prediction at the starting constants, as
    task=validate keeps them (a unit or transcription error would pull every constant); each row left out
    says why, and a set with none left is a one-line error."""
    pred = predict_s(single, base)
    keep = []
    for i, (p, m) in enumerate(zip(pred, measured_s)):
        try:
            check_plausible(rows[i], m * 1e3, p * 1e3)
            keep.append(i)
        except ConfigError as err:
            say(f"left out {err}")
    if not keep:
        raise ConfigError(f"calibrate.data: every row's measurement is more than {IMPLAUSIBLE_RATIO:g}x from its "
                          "prediction: check their values and units")
    return [single[i] for i in keep], measured_s[keep]


SCOPES = ("a100", "all")  # calibrate.scope


def _settings(cfg: DictConfig) -> Tuple[str, str]:
    """``calibrate.folds`` and ``calibrate.fit_on``, checked with each other and with the data's GPU."""
    folds = str(cfg.calibrate.folds)
    if folds not in GROUPS and folds not in ("none", "weak_scaling"):
        raise ConfigError(f"calibrate.folds={folds} is not one of {', '.join([*GROUPS, 'weak_scaling', 'none'])}")
    fit_on = str(cfg.calibrate.fit_on)
    if fit_on not in FIT_ON:
        raise ConfigError(f"calibrate.fit_on={fit_on} is not one of {', '.join(FIT_ON)}")
    if fit_on == "single_node" and folds == "weak_scaling":
        raise ConfigError("calibrate.folds=weak_scaling needs calibrate.fit_on=joint (it holds out weak-scaling rows)")
    if fit_on == "weak_scaling" and folds != "none":
        raise ConfigError(f"calibrate.fit_on=weak_scaling needs calibrate.folds=none (got {folds}): every single-node "
                          "run is held out already")
    if not cfg.calibrate.data and not str(cfg.cluster.gpu).startswith("a100_80gb"):
        raise ConfigError(f"calibrate.data is not set, and the shipped single-node runs ran on A100 80 GB: fitting "
                          f"gpu={cfg.cluster.gpu} to them would give it the A100's constants; give calibrate.data="
                          "<a CSV of runs on that GPU> or a cluster of A100 80 GB (+cluster=vtrain_a100)")
    return folds, fit_on


def run(cfg: DictConfig, out_dir: Path) -> int:
    scope = str(cfg.calibrate.get("scope", "a100"))
    if scope not in SCOPES:
        raise ConfigError(f"calibrate.scope={scope} is not one of {', '.join(SCOPES)}")
    if scope == "all":  # every GPU and stack on every shipped source, leave-one-source-out
        from vtrain.cli.task_calibrate_all import run_all

        return run_all(cfg, out_dir)
    require_group(cfg, "cluster")
    folds, fit_on = _settings(cfg)
    names = fitted_names(cfg)
    max_evals = cfg.extra.get("max_evals", 300)
    check_value("extra.max_evals", max_evals, MAX_EVALS)
    max_evals = int(max_evals)
    name = str(cfg.calibrate.data or "a100_single_node")
    path = resolve_dataset(name)
    # rows are read as task=validate reads them: a shipped set's own stack and defaults, else each row's
    stack = cfg.validate.stack or SHIPPED_STACK.get(name)
    defaults = shipped_defaults(name) if name in SHIPPED_STACK else None
    single, single_s, rows = single_node_workloads(cfg.cluster, path, stack, defaults=defaults)
    base = Constants.of(single[0])  # predict_s runs the weak-scaling rows on these constants too
    if fit_on != "single_node" and not base.gpu.name.startswith("a100_80gb"):
        raise ConfigError(f"calibrate.fit_on={fit_on} also fits the Megatron-LM weak-scaling table, measured on "
                          f"A100 80 GB; calibrate.data runs on gpu={base.gpu.name}: set calibrate.fit_on=single_node")
    single, single_s = _plausible(single, single_s, rows, base)
    if folds in GROUPS and len({str(GROUPS[folds](w)) for w in single}) < 2:
        raise ConfigError(f"calibrate.folds={folds}: the data holds one {folds} group ({GROUPS[folds](single[0])}); "
                          "leaving one out needs at least 2")
    weak, weak_s, _ = weak_scaling_workloads(weak_scaling_cluster(str(cfg.cluster.gpu)))
    datasets = [Dataset("single_node", single, single_s)] if fit_on != "weak_scaling" else []
    if fit_on != "single_node":
        datasets.append(Dataset("weak_scaling", weak, weak_s))
    on = " and ".join([f"{len(single)} single-node rows"] * (fit_on != "weak_scaling")
                      + [f"{len(weak)} weak-scaling rows"] * (fit_on != "single_node"))
    say(f"fitting {len(names)} constants ({', '.join(names)}) of gpu={base.gpu.name} and stack={base.stack.name} "
        f"on {on} (Nelder-Mead, <= {max_evals} evaluations) ...")
    fit = fit_constants(datasets, base, names, max_evals=max_evals)
    fitted = base.with_values(fit.constants)
    pred = predict_s(single, fitted)
    weak_mape = mape_pct(predict_s(weak, fitted), weak_s)
    weak_key = "out_of_sample" if fit_on == "single_node" else "in_sample"
    single_key = "out_of_sample" if fit_on == "weak_scaling" else "in_sample"
    result: Dict[str, Any] = {"gpu": base.gpu.name, "stack": base.stack.name, "fit_on": fit_on,
                              "constants": fit.constants, "evaluations": fit.evaluations}
    result.setdefault(single_key, {})["single_node"] = summarise(pred.tolist(), single_s.tolist()).line()
    result.setdefault(weak_key, {})["weak_scaling_mape_pct"] = weak_mape
    say(f"{single_key.replace('_', '-')} single-node: {result[single_key]['single_node']}")
    say(f"{weak_key.replace('_', '-')} weak-scaling MAPE: {weak_mape:.2f}%")
    folds_fit: List[Dict[str, float]] = []
    if folds == "weak_scaling":  # leave one published row out, keep every single-node run
        cv_pred, per_group = leave_one_group_out(datasets, 1, list(range(len(weak))), base, names,
                                                 max_evals=max(60, max_evals // 2), fold_constants=folds_fit)
        line = summarise(cv_pred.tolist(), weak_s.tolist()).line()
        result["cross_validated"] = {"folds": folds, "weak_scaling": line,
                                     "per_row": [{"row": weak[int(g)].model.name, "ape_pct": m}
                                                 for g, m, _ in per_group]}
        say(f"leave-one-row-out weak-scaling: {line}")
        for g, m, _ in per_group:
            say(f"  held out {weak[int(g)].model.name}: error {m:.2f}%")
    elif folds != "none":
        groups = [GROUPS[folds](w) for w in single]
        cv_pred, per_group = leave_one_group_out(datasets, 0, groups, base, names, max_evals=max(60, max_evals // 2),
                                                 fold_constants=folds_fit)
        line = summarise(cv_pred.tolist(), single_s.tolist()).line()
        result["cross_validated"] = {"folds": folds, "single_node": line,
                                     "per_group": [{"group": g, "mape_pct": m, "n": n} for g, m, n in per_group]}
        say(f"leave-one-{folds}-out single-node: {line}")
        for g, m, n in per_group:
            say(f"  held out {folds}={g}: MAPE {m:.2f}% (n={n})")
    result["per_constant"] = constant_table(datasets, fitted, fit.constants, folds_fit)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "calibration.json").write_text(json.dumps(result, indent=2, default=str))
    if cfg.calibrate.write:
        gpu_part = {k: v for k, v in fit.constants.items() if k in GPU_CONSTANTS}
        stack_part = {k: v for k, v in fit.constants.items() if k in STACK_CONSTANTS}
        say(f"updated {write_constants('gpu', base.gpu.name, gpu_part)} and "
              f"{write_constants('stack', base.stack.name, stack_part)}")
    say(f"wrote {out_dir / 'calibration.json'}")
    return 0
