"""The shape of the optimum, in every search summary: how sure the recommendation is.

- The near-optimal set: the plans whose 80% intervals of time to train overlap the fastest plan's (its slow
  end at or beyond their fast end), with the knobs in which each differs from it.
- The gain of the fastest plan over a baseline: the user's ``parallelism`` when given, else the recipe rule's
  plan (:func:`vtrain.search.baseline.baseline_plan`), with its interval: the two predictions' 80% intervals
  combined as independent errors in log space (ln(b/a) -/+ sqrt(down_b^2 + up_a^2), each side its own). When
  that interval includes no gain (its low end <= 0), the summary says the gain is "within the model's
  uncertainty".
- The sensitivity of time and cost to one step of each knob around the fastest plan
  (:mod:`vtrain.search.sensitivity`).

Intervals are those of the trials' metrics (``iteration_time_lo_s``/``hi_s`` relative to the point
prediction: time to train and cost share the iteration time's relative interval); a record without them
(a study stored before they were) has a zero-width interval.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from vtrain.errors import ConfigError
from vtrain.io.labels import fmt_days, plan_label
from vtrain.search.plans import SEARCHED_FIELDS, plan_fields, plan_from_fields
from vtrain.search.records import SearchResult, TrialRecord
from vtrain.search.sensitivity import Step, sensitivity, table_lines
from vtrain.workload.plan import ParallelPlan

NEAR_SHOWN = 5  # near-optimal plans listed (all are counted)
WITHIN = "within the model's uncertainty"
SHORT = {"micro_batch_size": "mb", "virtual_stages": "vp", "sequence_parallel": "sp",
         "distributed_optimizer": "dist-opt", "zero_stage": "zero", "recompute_num_layers": "rc layers"}


def _factors(m: Dict[str, float]) -> Tuple[float, float]:
    """(lo, hi) of a record's 80% interval relative to its point prediction (1, 1 without one)."""
    mid = m.get("predicted_iteration_time_s", m.get("iteration_time_s", 0.0))
    lo, hi = m.get("iteration_time_lo_s"), m.get("iteration_time_hi_s")
    if not mid or not lo or not hi:
        return 1.0, 1.0
    return min(1.0, lo / mid), max(1.0, hi / mid)


def _point(m: Dict[str, float], key: str) -> float:
    """The point prediction of ``key`` (a search ranked on the slow end keeps it as ``predicted_<key>``)."""
    return m.get(f"predicted_{key}", m[key])


def interval(m: Dict[str, float], key: str = "time_to_train_s") -> Tuple[float, float, float]:
    """(lo, point, hi) of a record's time to train (or cost)."""
    lo, hi = _factors(m)
    p = _point(m, key)
    return p * lo, p, p * hi


def differences(a: Dict[str, Any], b: Dict[str, Any]) -> str:
    """How plan ``a`` differs from ``b``, knob by knob: ``pp 8->16, mb 2->1``."""
    parts = [f"{SHORT.get(k, k)} {b.get(k)}->{a.get(k)}" for k in SEARCHED_FIELDS if a.get(k) != b.get(k)]
    return ", ".join(parts) or "the same plan"


@dataclass(frozen=True)
class NearPlan:
    label: str
    trial: int
    days: float
    days_lo: float
    days_hi: float
    cost_usd: float
    differs: str


@dataclass(frozen=True)
class Gain:
    """The fastest plan's gain in time to train over the baseline (percent; > 0: faster), with its interval."""

    baseline: str  # its label
    source: str  # "your parallelism" or the recipe rule's words
    baseline_days: float
    best_days: float
    gain_pct: float
    lo_pct: float
    hi_pct: float
    cost_gain_pct: float
    baseline_fits: bool = True

    @property
    def within_uncertainty(self) -> bool:
        return self.lo_pct <= 0.0


@dataclass
class Optimum:
    best: str
    near: List[NearPlan] = field(default_factory=list)
    near_total: int = 0
    gain: Optional[Gain] = None
    baseline_note: str = ""  # why there is no gain figure
    steps: List[Step] = field(default_factory=list)

    def lines(self) -> List[str]:
        out = [f"near-optimal (80% intervals of time to train overlap the fastest's): {self.near_total} plans"
               + (f", the {len(self.near)} fastest:" if self.near else "")]
        out += [f"  {n.label}: {fmt_days(n.days * 86400)} ({n.days_lo:,.1f} to {n.days_hi:,.1f}), "
                f"${n.cost_usd:,.0f}; differs in {n.differs}" for n in self.near]
        out.append(gain_line(self.gain) if self.gain is not None else f"gain over a baseline: {self.baseline_note}")
        if self.gain is not None and self.baseline_note:  # the user's plan could not be the baseline
            out.append(f"  ({self.baseline_note}: the recipe rule's plan is the baseline instead)")
        if self.steps:
            out.append(f"sensitivity around the fastest plan {self.best} (one step of each knob, GPUs kept):")
            out += table_lines(self.steps)
        return out

    def as_dict(self) -> Dict[str, Any]:
        g = None if self.gain is None else {**asdict(self.gain), "within_uncertainty": self.gain.within_uncertainty}
        return {"best": self.best, "near_optimal_count": self.near_total,
                "near_optimal": [asdict(n) for n in self.near], "gain_over_baseline": g,
                "baseline_note": self.baseline_note, "sensitivity": [asdict(s) for s in self.steps]}


def gain_line(g: Gain) -> str:
    verdict = f": {WITHIN}" if g.within_uncertainty else ""
    fits = "" if g.baseline_fits else " (the baseline exceeds the memory margin)"
    return (f"gain over the baseline {g.baseline} ({g.source}){fits}: {g.gain_pct:+.1f}% faster to train "
            f"(80% interval {g.lo_pct:+.1f}% to {g.hi_pct:+.1f}%), {g.cost_gain_pct:+.1f}% cheaper{verdict}")


def gain_over(best: Dict[str, float], base: Dict[str, float], label: str, source: str,
              fits: bool = True) -> Gain:
    """The gain of ``best`` over ``base`` (trial metrics), its interval by the module's rule."""
    b_lo, b_hi = _factors(base)
    a_lo, a_hi = _factors(best)
    ratio = _point(base, "time_to_train_s") / _point(best, "time_to_train_s")
    up = math.sqrt(math.log(b_hi) ** 2 + math.log(1 / a_lo) ** 2)
    down = math.sqrt(math.log(1 / b_lo) ** 2 + math.log(a_hi) ** 2)
    cost = _point(base, "cost_usd") / _point(best, "cost_usd")
    return Gain(label, source, _point(base, "time_to_train_s") / 86400, _point(best, "time_to_train_s") / 86400,
                (ratio - 1) * 100, (ratio * math.exp(-down) - 1) * 100, (ratio * math.exp(up) - 1) * 100,
                (cost - 1) * 100, fits)


def near_optimal(result: SearchResult, best: TrialRecord) -> List[TrialRecord]:
    """The distinct plans within the constraints whose interval overlaps the best's, fastest first."""
    _, _, best_hi = interval(best.metrics)
    seen = {best.plan_key}
    out = []
    for r in sorted(result.satisfying, key=lambda r: (_point(r.metrics, "time_to_train_s"), r.number)):
        if r.plan_key in seen:
            continue
        seen.add(r.plan_key)
        if interval(r.metrics)[0] <= best_hi:
            out.append(r)
    return out


def _baseline(result: SearchResult, user_plan: Optional[ParallelPlan]) -> Tuple[Optional[Dict[str, float]], str,
                                                                                 str, bool]:
    """(metrics, label, source, fits within the margin) of the baseline plan, or (None, why, "", False)."""
    from vtrain.search.baseline import baseline_plan
    from vtrain.search.objective import report_metrics
    from vtrain.sim.memory_margin import exceeds_margin

    ctx = result.context
    if user_plan is not None:
        report, _ = ctx.evaluator.simulate(user_plan)
        source, plan = "your parallelism", user_plan
    else:
        got = baseline_plan(ctx.workload, ctx.cost, gpus=ctx.space.gpu_limit)
        if got is None:
            return None, "the recipe rule finds no plan that fits", "", False
        report, source, plan = got.report, got.rule, got.plan
    metrics = report_metrics(report, ctx.evaluator.quantile)
    fits = report.fits and not exceeds_margin(report.peak_memory_bytes, ctx.workload.cluster)
    return metrics, plan_label(plan_fields(plan)), source, fits


def shape_of_optimum(result: SearchResult, user_plan: Optional[ParallelPlan] = None) -> Optional[Optimum]:
    """The near-optimal set, the gain over the baseline and the sensitivity around the fastest plan of a
    finished search (None: no fastest plan, or no search context to simulate with)."""
    best = result.best.get("time")
    ctx = result.context
    if best is None or ctx is None or not best.plan:
        return None
    near = near_optimal(result, best)
    shown = []
    for r in near[:NEAR_SHOWN]:
        lo, mid, hi = interval(r.metrics)
        shown.append(NearPlan(plan_label(r.plan or {}), r.number, mid / 86400, lo / 86400, hi / 86400,
                              _point(r.metrics, "cost_usd"), differences(r.plan or {}, best.plan)))
    opt = Optimum(plan_label(best.plan), shown, len(near))
    try:
        metrics, label, source, fits = _baseline(result, user_plan)
    except ConfigError as err:  # a user plan the simulator refuses: said, the search's result stands
        metrics, label, source, fits = None, f"the baseline could not be simulated ({err})", "", False
    if metrics is None:
        opt.baseline_note = label
    else:
        opt.gain = gain_over(best.metrics, metrics, label, source, fits)
    opt.steps = sensitivity(ctx, plan_from_fields(ctx.space.base, best.plan), best.metrics)
    return opt


def user_plan_of(cfg: Any) -> Tuple[Optional[ParallelPlan], str]:
    """(the user's ``parallelism`` as a plan, "") when the command line set any ``parallelism`` key or preset;
    (None, why not) when it is no plan for this cluster; (None, "") when none was given."""
    try:
        from hydra.core.hydra_config import HydraConfig

        given = [str(o) for o in HydraConfig.get().overrides.task]
    except Exception:  # compose API: no Hydra run, no command line
        return None, ""
    if not any(o.lstrip("+~").split("=", 1)[0].split(".")[0] == "parallelism" for o in given):
        return None, ""
    from vtrain.config.build import build_workload

    try:
        return build_workload(cfg).plan, ""
    except ConfigError as err:
        return None, f"your parallelism is no plan for this cluster ({err})"


def summary_doc(result: SearchResult, opt: Optional[Optimum]) -> Dict[str, Any]:
    """summary.json: the search's counts, its fastest and cheapest plans, and the shape of the optimum."""
    best = {name: {"plan": plan_label(r.plan or {}), "trial": r.number, "metrics": dict(r.metrics)}
            for name, r in result.best.items()}
    return {"model": result.model, "cluster": result.cluster, "sampler": result.sampler,
            "plans": len(result.records), "feasible": len(result.feasible),
            "within_constraints": len(result.satisfying), "pareto_size": len(result.front), "best": best,
            "optimum": None if opt is None else opt.as_dict()}


def optimum_tags(result: SearchResult) -> Dict[str, str]:
    """MLflow tags of the parent run: the near-optimal count and the gain over the baseline, in words."""
    opt = getattr(result, "optimum", None)
    if opt is None:
        return {}
    tags = {"vtrain.near_optimal": f"{opt.near_total} plans overlap the fastest's 80% interval",
            "vtrain.gain_over_baseline": gain_line(opt.gain) if opt.gain is not None else opt.baseline_note}
    if opt.gain is not None:
        tags["vtrain.baseline"] = f"{opt.gain.baseline} ({opt.gain.source})"
    return tags


def optimum_metrics(result: SearchResult) -> Dict[str, float]:
    """MLflow metrics of the parent run: the gain and its interval (percent), the near-optimal count."""
    opt = getattr(result, "optimum", None)
    if opt is None:
        return {}
    m = {"near_optimal_plans": float(opt.near_total)}
    if opt.gain is not None:
        m.update({"gain_pct": opt.gain.gain_pct, "gain_lo_pct": opt.gain.lo_pct, "gain_hi_pct": opt.gain.hi_pct})
    return m


def report_optimum(result: SearchResult, cfg: Any, out_dir: Any) -> Tuple[List[str], Any]:
    """The shape of the optimum of a finished search: its lines for the console, ``summary.json`` written in
    ``out_dir`` (returned), and ``result.optimum`` set for MLflow."""
    import json
    from pathlib import Path

    plan, why = user_plan_of(cfg)
    opt = shape_of_optimum(result, plan)
    if opt is not None and why:
        opt.baseline_note = why
    result.optimum = opt
    path = Path(out_dir) / "summary.json"
    path.write_text(json.dumps(summary_doc(result, opt), indent=2, default=str))
    return ([] if opt is None else ["", *opt.lines()]), path
