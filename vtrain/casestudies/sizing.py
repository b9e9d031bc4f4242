"""Case study 3 (vTrain, MICRO'24): compute-optimal model sizing with real throughput.

Given a compute budget (GPU-hours, or dollars at the pricing config's rate) and a wall-clock deadline
on one cluster, which model shape should be trained, and on how many tokens? Each candidate shape is
scored with the Chinchilla parametric loss (Hoffmann et al. 2022, Eq. 2 and the fit of Sec. 3.3 /
Approach 3):  L(N, D) = E + A / N^alpha + B / D^beta,  E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28.

- *fixed MFU* (the usual Chinchilla-style planning): every shape trains on all GPUs of the cluster at
  an assumed MFU; tokens D = MFU · peak · GPUs · T / (6 N) (C ≈ 6 N D, Kaplan et al. 2020), with
  T = min(deadline, budget / GPUs).
- *vtrain*: for each shape, vtrain searches a small plan space (GPU count, tp, pp, micro-batch,
  recompute) and keeps the plan that trains the most tokens within budget and deadline:
  D = tokens/s · min(deadline, budget / GPUs). Plans that do not fit in memory are dropped.

The choice of each method is the shape with the lowest predicted loss; the fixed-MFU choice is then
re-scored with vtrain's tokens to show what it really reaches.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import MISSING, DictConfig

from vtrain.casestudies.common import DAY_S, StudyResult, fmt_table, parse_params
from vtrain.casestudies.plans import GpuCountSpace, best_plan
from vtrain.config.validate import check_model
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.io.labels import plan_label
from vtrain.report import Report
from vtrain.workload.workload import Workload


@dataclass(frozen=True)
class ChinchillaFit:
    """Hoffmann et al. 2022 ("Training Compute-Optimal LLMs"), Eq. 2 with the Approach-3 fit."""

    E: float = 1.69
    A: float = 406.4
    B: float = 410.7
    alpha: float = 0.34
    beta: float = 0.28

    def __post_init__(self) -> None:
        """The fit's domain (Hoffmann et al.'s values: E = 1.69, A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28):
        an irreducible loss >= 0 and positive scales and exponents, finite and of a sane size."""
        for name, lo, hi in (("E", 0.0, 1e3), ("A", 1e-12, 1e12), ("B", 1e-12, 1e12), ("alpha", 1e-3, 10.0),
                             ("beta", 1e-3, 10.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise ConfigError(f"case_study.params.loss.{name}={value} must be a number in [{lo:g}, {hi:g}]")

    def loss(self, n_params: float, n_tokens: float) -> float:
        return self.E + self.A / n_params ** self.alpha + self.B / n_tokens ** self.beta

    def optimum(self, flops: float) -> tuple[float, float]:
        """(N_opt, D_opt) minimising L under C = 6 N D (Hoffmann et al. 2022, Eq. 4)."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))
        a = self.beta / (self.alpha + self.beta)
        b = self.alpha / (self.alpha + self.beta)
        return g * (flops / 6.0) ** a, (flops / 6.0) ** b / g


@dataclass
class Shape:
    name: str = MISSING
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING


@dataclass
class SizingParams:
    budget_gpu_hours: float = 0.0  # exactly one of budget_gpu_hours / budget_usd
    budget_usd: float = 0.0
    deadline_days: float = MISSING
    assumed_mfu: float = 0.45  # the fixed-MFU method's assumption
    shapes: List[Shape] = field(default_factory=list)
    gpu_counts: List[int] = field(default_factory=list)  # empty: cluster/4, cluster/2, cluster
    plan_tp: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    plan_max_pp: int = 16
    plan_micro_batch_sizes: List[int] = field(default_factory=lambda: [1, 2])
    plan_recompute: List[str] = field(default_factory=lambda: ["selective", "full"])
    loss: Dict[str, float] = field(default_factory=dict)  # override the Chinchilla fit: E, A, B, alpha, beta


@dataclass(frozen=True)
class ShapeResult:
    shape: Shape
    params: float
    tokens_fixed: float
    loss_fixed: float
    best: Optional[Report]
    time_s: float  # vtrain: wall-clock of the best plan within budget and deadline
    tokens: float  # vtrain: tokens trained within budget and deadline
    loss: float


def _checked(prm: SizingParams, w: Workload) -> Tuple[ChinchillaFit, float, List[int]]:
    """The loss fit, the budget in GPU-hours and the GPU counts tried, each parameter checked (one-line errors)."""
    try:
        fit = ChinchillaFit(**prm.loss)
    except TypeError as exc:
        raise ConfigError(f"case_study.params.loss: {exc}; keys are E, A, B, alpha, beta") from None
    if (prm.budget_gpu_hours > 0) == (prm.budget_usd > 0):
        raise ConfigError("case_study.params: set exactly one of budget_gpu_hours and budget_usd to a positive "
                          f"number (got {prm.budget_gpu_hours} and {prm.budget_usd})")
    budget_h = prm.budget_gpu_hours or prm.budget_usd / w.usd_per_gpu_hour
    if not prm.deadline_days or prm.deadline_days <= 0:
        raise ConfigError(f"case_study.params.deadline_days={prm.deadline_days} must be a positive number")
    if not 0 < prm.assumed_mfu <= 1:
        raise ConfigError(f"case_study.params.assumed_mfu={prm.assumed_mfu} must be in (0, 1]")
    if not prm.shapes:
        raise ConfigError("case_study.params.shapes is empty: list model shapes {name, num_layers, hidden_size, "
                          "num_heads}")
    n_gpus = w.cluster.num_gpus
    counts = sorted(set(prm.gpu_counts)) or sorted({max(w.cluster.gpus_per_node, n_gpus // 4), n_gpus // 2, n_gpus})
    if any(g <= 0 or g > n_gpus for g in counts):
        raise ConfigError(f"case_study.params.gpu_counts={counts}: each must be in 1..{n_gpus} "
                          f"(cluster {w.cluster.name})")
    return fit, budget_h, counts


def _shape_results(prm: SizingParams, w: Workload, cost: CostModel, fit: ChinchillaFit, budget_h: float,
                   counts: List[int]) -> List[ShapeResult]:
    """Each shape: the tokens and loss a fixed MFU predicts, and vtrain's best plan over the GPU counts."""
    n_gpus = w.cluster.num_gpus
    deadline_s = prm.deadline_days * DAY_S
    peak = w.cluster.gpu.peak_flops_per_s(w.plan.precision.value)
    space = GpuCountSpace.of(prm)
    tokens_per_iter = w.plan.global_batch_size * w.plan.seq_len
    results: List[ShapeResult] = []
    for sh in prm.shapes:
        model = dataclasses.replace(w.model, name=sh.name, num_layers=sh.num_layers, hidden_size=sh.hidden_size,
                                    num_heads=sh.num_heads, num_kv_heads=sh.num_heads,
                                    ffn_hidden_size=(w.model.ffn_hidden_size * sh.hidden_size) // w.model.hidden_size)
        try:
            check_model(model)
        except ConfigError as err:
            raise ConfigError(f"case_study.params.shapes[{sh.name}]: {err}") from None
        n = float(model.total_params())
        t_fixed = min(deadline_s, budget_h * 3600.0 / n_gpus)
        d_fixed = prm.assumed_mfu * peak * n_gpus * t_fixed / (6.0 * n)
        sw = dataclasses.replace(w, model=model)
        best: Optional[Report] = None
        best_tokens, best_time = 0.0, 0.0
        for g in counts:
            r = best_plan(sw, cost, g, space)  # fastest fitting plan on g GPUs
            if r is None:
                continue
            t = min(deadline_s, budget_h * 3600.0 / r.gpus_used)
            d = r.tokens_per_s * t
            if d > best_tokens:
                best, best_tokens, best_time = r, d, t
        if best is not None and best_tokens < tokens_per_iter:
            best_tokens = 0.0  # not even one iteration fits the budget
        loss = fit.loss(n, best_tokens) if best_tokens > 0 else math.inf
        results.append(ShapeResult(sh, n, d_fixed, fit.loss(n, d_fixed) if d_fixed > 0 else math.inf,
                                   best, best_time, best_tokens, loss))

    return results


def _row(r: ShapeResult, chin: ShapeResult, vt: ShapeResult, usd_per_gpu_hour: float) -> Dict[str, Any]:
    """One shape's table row (its plan, tokens and loss under vtrain, and which method chose it)."""
    b = r.best
    return {
        "shape": r.shape.name, "layers": r.shape.num_layers, "hidden": r.shape.hidden_size,
        "heads": r.shape.num_heads, "params_b": r.params / 1e9,
        "tokens_fixed_mfu": r.tokens_fixed, "loss_fixed_mfu": r.loss_fixed,
        "feasible_vtrain": math.isfinite(r.loss),
        "plan": plan_label(b.plan) if b else "none fits", "gpus": b.gpus_used if b else 0,
        "mfu_vtrain_pct": 100 * b.mfu if b else 0.0, "iteration_time_s": b.iteration_time_s if b else math.nan,
        "tokens_vtrain": r.tokens, "tokens_per_param": r.tokens / r.params,
        "loss_vtrain": r.loss if math.isfinite(r.loss) else None,
        "train_days": r.time_s / DAY_S if b else math.nan,
        "gpu_hours": (b.gpus_used * r.time_s / 3600) if b else 0.0,
        "cost_usd": (b.gpus_used * r.time_s / 3600 * usd_per_gpu_hour) if b else 0.0,
        "chinchilla_choice": r is chin, "vtrain_choice": r is vt,
    }


def _describe(r: ShapeResult, tag: str) -> str:
    lv = f"{r.loss:.4f}" if math.isfinite(r.loss) else "inf (no fitting plan)"
    return (f"{tag}: {r.shape.name} ({r.params / 1e9:.1f}B params): fixed-MFU predicts "
            f"{r.tokens_fixed / 1e9:,.0f}B "
            f"tokens, loss {r.loss_fixed:.4f}; vtrain: {r.tokens / 1e9:,.0f}B tokens "
            f"(MFU {r.best.mfu * 100 if r.best else 0:.1f}%, {plan_label(r.best.plan) if r.best else '-'} on "
            f"{r.best.gpus_used if r.best else 0} GPUs), loss {lv}")


def run_study(cfg: DictConfig, w: Workload, cost: CostModel) -> StudyResult:
    prm = parse_params(SizingParams, cfg.case_study.params)
    fit, budget_h, counts = _checked(prm, w)
    n_gpus = w.cluster.num_gpus
    deadline_s = prm.deadline_days * DAY_S
    peak = w.cluster.gpu.peak_flops_per_s(w.plan.precision.value)
    results = _shape_results(prm, w, cost, fit, budget_h, counts)

    feasible = [r for r in results if math.isfinite(r.loss)]
    if not feasible:
        smallest = min(results, key=lambda r: r.params)
        need = ""
        if smallest.best is not None:
            need = (f"; one iteration of the smallest shape {smallest.shape.name} takes "
                    f"{smallest.best.iteration_time_s * smallest.best.gpus_used / 3600:,.2f} GPU-hours")
        raise ConfigError(f"case_study.params: a budget of {budget_h:,.4g} GPU-hours within {prm.deadline_days:g} days "
                          f"is too small for any model shape on {w.cluster.name}{need}")
    chin = min((r for r in results if math.isfinite(r.loss_fixed)), key=lambda r: r.loss_fixed)
    vt = min(feasible, key=lambda r: r.loss)
    c_eff = prm.assumed_mfu * peak * n_gpus * min(deadline_s, budget_h * 3600.0 / n_gpus)
    n_opt, d_opt = fit.optimum(c_eff)

    rows = [_row(r, chin, vt, w.usd_per_gpu_hour) for r in results]
    summary: Dict[str, Any] = {
        "cluster": w.cluster.name, "gpus": n_gpus, "gpu": w.cluster.gpu.name, "gpu_counts": counts,
        "usd_per_gpu_hour": w.usd_per_gpu_hour, "budget_gpu_hours": budget_h,
        "budget_usd": budget_h * w.usd_per_gpu_hour, "deadline_days": prm.deadline_days,
        "assumed_mfu": prm.assumed_mfu, "global_batch_size": w.plan.global_batch_size,
        "seq_len": w.plan.seq_len, "loss_fit": dataclasses.asdict(fit),
        "chinchilla_closed_form": {"flops": c_eff, "params_b": n_opt / 1e9, "tokens": d_opt,
                                   "loss": fit.loss(n_opt, d_opt)},
        "chinchilla_choice": _row(chin, chin, vt, w.usd_per_gpu_hour),
        "vtrain_choice": _row(vt, chin, vt, w.usd_per_gpu_hour),
        "same_choice": chin is vt,
        "loss_gap_of_fixed_mfu_choice": (chin.loss - vt.loss) if math.isfinite(chin.loss) else None,
    }
    metrics = {"vtrain_choice_params_b": vt.params / 1e9, "vtrain_choice_loss": vt.loss,
               "vtrain_choice_tokens": vt.tokens, "chinchilla_choice_params_b": chin.params / 1e9,
               "chinchilla_choice_loss_fixed_mfu": chin.loss_fixed, "closed_form_params_b": n_opt / 1e9,
               "same_choice": float(chin is vt), "shapes_feasible": float(len(feasible))}
    if math.isfinite(chin.loss):
        metrics["chinchilla_choice_loss_vtrain"] = chin.loss
        metrics["loss_gap"] = chin.loss - vt.loss
    params = {"cluster": w.cluster.name, "budget_gpu_hours": budget_h, "deadline_days": prm.deadline_days,
              "assumed_mfu": prm.assumed_mfu, "shapes": [s.name for s in prm.shapes], "gpu_counts": counts,
              "global_batch_size": w.plan.global_batch_size, "seq_len": w.plan.seq_len,
              "plan_tp": prm.plan_tp, "plan_max_pp": prm.plan_max_pp, "loss_fit": dataclasses.asdict(fit)}
    runs = [{"name": r["shape"], "params": {"shape": r["shape"], "plan": r["plan"]},
             "metrics": {k: float(v) for k, v in r.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}}
            for r in rows]

    lines = [
        f"case study 3: budget {budget_h:,.0f} GPU-hours (${budget_h * w.usd_per_gpu_hour:,.0f}), deadline "
        f"{prm.deadline_days:g} days, {w.cluster.name} ({n_gpus} x {w.cluster.gpu.name}), GPU counts {counts}",
        f"closed-form Chinchilla optimum at {prm.assumed_mfu * 100:.0f}% MFU on all GPUs: C = {c_eff:.3g} FLOPs -> "
        f"N = {n_opt / 1e9:.1f}B, D = {d_opt / 1e9:,.0f}B tokens, loss {fit.loss(n_opt, d_opt):.4f}",
        fmt_table(rows, ["shape", "params_b", "tokens_fixed_mfu", "loss_fixed_mfu", "plan", "gpus", "mfu_vtrain_pct",
                         "tokens_vtrain", "loss_vtrain", "train_days"]),
        _describe(chin, "fixed-MFU choice"),
        _describe(vt, "vtrain choice   "),
        ("the two methods choose the same shape" if chin is vt else
         f"they differ: the fixed-MFU choice reaches loss "
         f"{chin.loss:.4f} under vtrain's throughput, {chin.loss - vt.loss:+.4f} vs vtrain's choice"),
    ]
    headline = (f"vtrain's choice {vt.shape.name} ({vt.params / 1e9:.1f}B params, {vt.tokens / 1e9:,.0f}B tokens, "
                f"loss {vt.loss:.4f}); fixed-MFU choice {chin.shape.name}")
    return StudyResult("compute_optimal", str(cfg.case_study.title or "Compute-optimal model sizing"),
                       {"shapes": rows}, summary, params, metrics, "\n".join(lines), {"results": results}, runs,
                       headline)
