"""Case study 1 (vTrain, MICRO'24): cost-effective parallelization of MT-NLG 530B.

Every valid (tp, pp, dp) with tp from ``params.tp``, pp dividing the layers, dp dividing the global
batch and tp·pp·dp ≤ the cluster's GPUs is simulated with the rest of the plan fixed (``parallelism``:
micro-batch, recompute, schedule). Each plan is compared with the published baseline plan,
(tp, pp, dp) = (8, 35, 12) on 3,360 A100s for MT-NLG (Smith et al. 2022): a plan *beats the baseline
on cost* if it fits memory, costs less and takes no longer; it *beats it on time* if it fits, is faster
and costs no more. Savings are percent of the baseline's value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from omegaconf import DictConfig

from vtrain.casestudies.common import DAY_S, GIB, StudyResult, fmt_table, parse_params, pct_saved
from vtrain.casestudies.plans import divisors, pareto, simulate, with_plan
from vtrain.config.validate import check_plan
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.workload.workload import Workload


@dataclass
class BaselinePlan:
    tp: int = 8
    pp: int = 35
    dp: int = 12


@dataclass
class ParallelizationParams:
    tp: List[int] = field(default_factory=lambda: [4, 8, 16])
    pp: List[int] = field(default_factory=list)  # empty: every divisor of model.num_layers
    dp: List[int] = field(default_factory=list)  # empty: every divisor of training.global_batch_size
    max_gpus: int = 0  # 0: the cluster's GPUs
    min_gpus: int = 1
    baseline: BaselinePlan = field(default_factory=BaselinePlan)
    time_tolerance: float = 0.0  # "equal time/cost": relative slack when comparing with the baseline
    show: int = 10  # rows printed per ranking


def _row(r: Report, base: Optional[Report], is_base: bool) -> Dict[str, Any]:
    p = r.plan.as_dict()
    row: Dict[str, Any] = {
        "tp": p["tp"], "pp": p["pp"], "dp": p["dp"], "gpus": r.gpus_used, "micro_batches": p["num_microbatches"],
        "iteration_time_s": r.iteration_time_s, "time_to_train_days": r.time_to_train_s / DAY_S,
        "gpu_hours": r.gpu_hours, "cost_usd": r.cost_usd, "mfu_pct": 100 * r.mfu, "tokens_per_s": r.tokens_per_s,
        "peak_memory_gib": r.peak_memory_bytes / GIB, "fits": r.fits, "baseline": is_base,
    }
    if base is not None:
        row["time_saved_pct"] = pct_saved(r.time_to_train_s, base.time_to_train_s)
        row["cost_saved_pct"] = pct_saved(r.cost_usd, base.cost_usd)
        row["mfu_gain_pct"] = 100.0 * (r.mfu - base.mfu) / base.mfu
    return row


def _shape(r: Report) -> tuple[int, int, int]:
    return r.plan.tp, r.plan.pp, r.plan.dp


def _baseline(base_w: Workload, cost: CostModel) -> Report:
    """The baseline plan's report; a baseline that is no valid plan raises its one-line reason."""
    base = simulate(base_w, cost)
    if base is None:
        check_plan(base_w.model, base_w.plan, base_w.cluster)  # raises the one-line reason
        raise ConfigError("case_study.params.baseline: the baseline plan could not be simulated")
    return base


def _sweep(w: Workload, cost: CostModel, prm: ParallelizationParams, max_gpus: int, pps: Sequence[int],
           dps: Sequence[int]
           ) -> List[Report]:
    """Every valid (tp, pp, dp) of the swept ranges within the GPU bounds, simulated."""
    reports: List[Report] = []
    for tp in prm.tp:
        for pp in pps:
            for dp in dps:
                gpus = tp * pp * dp
                if gpus > max_gpus or gpus < prm.min_gpus:
                    continue
                r = simulate(with_plan(w, tp=tp, pp=pp, dp=dp), cost)
                if r is not None:
                    reports.append(r)
    return reports


def _metrics(base: Report, reports: List[Report], fitting: List[Report], cheaper: List[Report],
             faster: List[Report]) -> Dict[str, float]:
    """The study's MLflow metrics: the baseline, the counts and the best plans' savings."""
    metrics = {
        "baseline_time_days": base.time_to_train_s / DAY_S, "baseline_cost_usd": base.cost_usd,
        "baseline_mfu_pct": 100 * base.mfu, "plans_simulated": float(len(reports)),
        "plans_fitting": float(len(fitting)),
        "plans_cheaper": float(len(cheaper)), "plans_faster": float(len(faster)),
    }
    if cheaper:
        metrics.update(best_cost_saved_pct=pct_saved(cheaper[0].cost_usd, base.cost_usd),
                       best_cost_time_saved_pct=pct_saved(cheaper[0].time_to_train_s, base.time_to_train_s),
                       best_cost_mfu_pct=100 * cheaper[0].mfu)
    if faster:
        metrics.update(best_time_saved_pct=pct_saved(faster[0].time_to_train_s, base.time_to_train_s),
                       best_time_cost_saved_pct=pct_saved(faster[0].cost_usd, base.cost_usd))
    return metrics


def _runs(base: Report, cheaper: List[Report], faster: List[Report], front: List[Report]) -> List[Dict[str, Any]]:
    """MLflow child runs: the baseline, the three cheapest and fastest plans beating it, the Pareto front."""
    runs = []
    for role, rs in (("baseline", [base]), ("cheaper", cheaper[:3]), ("faster", faster[:3]), ("pareto", front)):
        for r in rs:
            row = _row(r, base, role == "baseline")
            runs.append({"name": f"{role} ({r.plan.tp},{r.plan.pp},{r.plan.dp})",
                         "params": {"tp": r.plan.tp, "pp": r.plan.pp, "dp": r.plan.dp, "role": role},
                         "metrics": {k: float(v) for k, v in row.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)}})
    return runs


def _summary(w: Workload, base: Report, reports: List[Report], fitting: List[Report], cheaper: List[Report],
             faster: List[Report], front: List[Report], is_base: Callable[[Report], bool]) -> Dict[str, Any]:
    """The study's summary.json: the setting, the baseline, the counts and the best plans."""
    summary: Dict[str, Any] = {
        "model": w.model.name, "cluster": w.cluster.name, "gpu": w.cluster.gpu.name,
        "usd_per_gpu_hour": w.usd_per_gpu_hour, "tokens_to_train": w.tokens_to_train,
        "global_batch_size": w.plan.global_batch_size, "seq_len": w.plan.seq_len,
        "micro_batch_size": w.plan.micro_batch_size,
        "recompute": w.plan.recompute.value, "schedule": w.plan.schedule.value, "cost_model": base.cost_model,
        "plans_simulated": len(reports), "plans_fitting": len(fitting),
        "baseline": _row(base, base, True),
        "plans_cheaper_at_equal_or_lower_time": len(cheaper), "plans_faster_at_equal_or_lower_cost": len(faster),
        "best_cost_at_equal_or_lower_time": _row(cheaper[0], base, False) if cheaper else None,
        "best_time_at_equal_or_lower_cost": _row(faster[0], base, False) if faster else None,
        "cheapest_fitting": _row(min(fitting, key=lambda r: r.cost_usd), base, False) if fitting else None,
        "fastest_fitting": _row(min(fitting, key=lambda r: r.time_to_train_s), base, False) if fitting else None,
        "pareto_front": [_row(r, base, is_base(r)) for r in front],
    }
    return summary


def run_study(cfg: DictConfig, w: Workload, cost: CostModel) -> StudyResult:
    prm = parse_params(ParallelizationParams, cfg.case_study.params)
    layers, gbs = w.model.num_layers, w.plan.global_batch_size
    max_gpus = prm.max_gpus or w.cluster.num_gpus
    if prm.max_gpus > w.cluster.num_gpus:
        raise ConfigError(f"case_study.params.max_gpus={prm.max_gpus} exceeds the {w.cluster.num_gpus} GPUs of "
                          f"cluster {w.cluster.name}")
    pps = prm.pp or divisors(layers, max_gpus)
    dps = prm.dp or divisors(gbs, max_gpus)
    if not prm.tp:
        raise ConfigError("case_study.params.tp is empty: list the tensor-parallel sizes to sweep")

    b = prm.baseline
    base_w = with_plan(w, tp=b.tp, pp=b.pp, dp=b.dp)
    base = _baseline(base_w, cost)

    reports = _sweep(w, cost, prm, max_gpus, pps, dps)
    if not reports:
        raise ConfigError(f"no valid (tp,pp,dp) plan for {w.model.name} on ≤{max_gpus} GPUs with tp in {prm.tp}")
    key = (b.tp, b.pp, b.dp)
    if not any(_shape(r) == key for r in reports):
        reports.append(base)  # the baseline is outside the swept ranges: keep it in the table

    tol = 1.0 + prm.time_tolerance
    fitting = [r for r in reports if r.fits]
    is_base = lambda r: _shape(r) == key  # noqa: E731
    cheaper = sorted((r for r in fitting if not is_base(r) and r.time_to_train_s <= base.time_to_train_s * tol
                      and r.cost_usd < base.cost_usd), key=lambda r: r.cost_usd)
    faster = sorted((r for r in fitting if not is_base(r) and r.cost_usd <= base.cost_usd * tol
                     and r.time_to_train_s < base.time_to_train_s), key=lambda r: r.time_to_train_s)
    front = pareto(fitting)
    front_keys = {_shape(r) for r in front}
    cheaper_keys = {_shape(r) for r in cheaper}
    faster_keys = {_shape(r) for r in faster}

    rows = []
    for r in sorted(reports, key=lambda r: (not r.fits, r.cost_usd)):
        k = _shape(r)
        row = _row(r, base, is_base(r))
        row.update(pareto=k in front_keys, beats_baseline_cost=k in cheaper_keys, beats_baseline_time=k in faster_keys)
        rows.append(row)

    summary = _summary(w, base, reports, fitting, cheaper, faster, front, is_base)
    metrics = _metrics(base, reports, fitting, cheaper, faster)
    params = {"model": w.model.name, "cluster": w.cluster.name, "tp": prm.tp, "max_gpus": max_gpus,
              "baseline": f"({b.tp},{b.pp},{b.dp})", "global_batch_size": gbs, "seq_len": w.plan.seq_len,
              "micro_batch_size": w.plan.micro_batch_size, "recompute": w.plan.recompute.value,
              "schedule": w.plan.schedule.value, "tokens_to_train": w.tokens_to_train,
              "usd_per_gpu_hour": w.usd_per_gpu_hour}

    cols = ["tp", "pp", "dp", "gpus", "time_to_train_days", "cost_usd", "mfu_pct", "peak_memory_gib",
            "time_saved_pct", "cost_saved_pct"]
    br = _row(base, base, True)
    lines = [
        f"case study 1: {w.model.name} on {w.cluster.name} ({w.cluster.num_gpus} x {w.cluster.gpu.name}), "
        f"gbs {gbs}, mb {w.plan.micro_batch_size}, seq {w.plan.seq_len}, recompute {w.plan.recompute.value}, "
        f"{w.tokens_to_train / 1e9:,.0f}B tokens, ${w.usd_per_gpu_hour:.2f}/GPU-h",
        f"{len(reports)} valid plans simulated, {len(fitting)} fit in memory",
        f"baseline (tp,pp,dp)=({b.tp},{b.pp},{b.dp}) on {base.gpus_used} GPUs: {br['time_to_train_days']:.1f} days, "
        f"${base.cost_usd / 1e6:.2f}M, MFU {base.mfu * 100:.1f}%, {br['peak_memory_gib']:.1f} GiB"
        + ("" if base.fits else " (DOES NOT FIT)"),
        f"\ncheaper than the baseline at equal or lower time ({len(cheaper)} plans):",
        fmt_table([_row(r, base, False) for r in cheaper[:prm.show]], cols) if cheaper else "  none",
        f"\nfaster than the baseline at equal or lower cost ({len(faster)} plans):",
        fmt_table([_row(r, base, False) for r in faster[:prm.show]], cols) if faster else "  none",
        f"\ntime-cost Pareto front of the fitting plans ({len(front)} plans):",
        fmt_table([_row(r, base, is_base(r)) for r in front[:prm.show]], cols),
    ]
    data = {"reports": reports, "base": base, "front": front, "cheaper": cheaper, "faster": faster}
    runs = _runs(base, cheaper, faster, front)
    if cheaper:
        c = cheaper[0]
        headline = (f"cheapest at <= the baseline's time: (tp,pp,dp)=({c.plan.tp},{c.plan.pp},{c.plan.dp}), "
                    f"{pct_saved(c.cost_usd, base.cost_usd):.2f}% cheaper than ({b.tp},{b.pp},{b.dp})")
    else:
        headline = f"no plan beats the baseline ({b.tp},{b.pp},{b.dp}) on cost at equal or lower time"
    return StudyResult("parallelization", str(cfg.case_study.title or "Cost-effective parallelization"),
                       {"plans": rows}, summary, params, metrics, "\n".join(lines), data, runs, headline)
