"""The sensitivity of the optimum: time and cost after one step of each knob around the best plan.

Knobs (:data:`KNOBS`): tp, pp, ep, cp (halved and doubled, dp the other way so that the GPU count stays), the
virtual pipeline stages (halved and doubled; 1 is 1F1B, and 1F1B steps up to 2), the micro-batch (halved and
doubled), recompute (the next lighter and heavier of none, selective, full) and the ZeRO stage (one down and
one up). Each step is one simulation through the search's own evaluator (memoised: a plan the search already
ran costs nothing), ~16 in all; a step that is no valid plan or does not fit says why.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from vtrain.errors import ConfigError
from vtrain.search.plans import canonical
from vtrain.workload.enums import Recompute, Schedule
from vtrain.workload.plan import ParallelPlan

KNOBS = ("tp", "pp", "ep", "cp", "vp", "micro-batch", "recompute", "ZeRO stage")
RECOMPUTE_LADDER = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # lightest first
REASON_CHARS = 70  # a refused step's reason, shortened to fit the table


@dataclass(frozen=True)
class Step:
    """One step of one knob: the change, and the time and cost relative to the best plan (percent) or why the
    step is no plan."""

    knob: str
    change: str
    time_pct: Optional[float] = None
    cost_pct: Optional[float] = None
    reason: Optional[str] = None


def _degree_steps(plan: ParallelPlan, knob: str) -> List[Tuple[str, Optional[Dict[str, Any]]]]:
    """Halve and double a degree (tp, pp, ep, cp), dp the other way for tp, pp and cp (the GPUs stay)."""
    now = int(getattr(plan, knob))
    out: List[Tuple[str, Optional[Dict[str, Any]]]] = []
    for new in (now // 2, now * 2):
        if new < 1 or new == now or (new < now and now % 2):
            continue
        change: Dict[str, Any] = {knob: new}
        if knob != "ep":  # ep splits the experts over ranks already there: no GPU moves
            dp = plan.dp * now
            change["dp"] = dp // new if dp % new == 0 else 0
        out.append((f"{knob} {now} -> {new}", change if change.get("dp", 1) else None))
    return out


def _vp_steps(plan: ParallelPlan) -> List[Tuple[str, Optional[Dict[str, Any]]]]:
    if plan.pp == 1:
        return []
    v = plan.virtual_stages if plan.schedule == Schedule.INTERLEAVED else 1
    out: List[Tuple[str, Optional[Dict[str, Any]]]] = []
    for new in (v // 2, v * 2):
        if new < 1 or new == v:
            continue
        sched = Schedule.INTERLEAVED if new > 1 else Schedule.ONE_F_ONE_B
        out.append((f"vp {v} -> {new}", {"schedule": sched, "virtual_stages": new}))
    return out


def _ladder_steps(plan: ParallelPlan) -> List[Tuple[str, Dict[str, Any]]]:
    """Micro-batch halved and doubled, recompute one lighter and one heavier, ZeRO one stage down and up."""
    out: List[Tuple[str, Dict[str, Any]]] = []
    mb = plan.micro_batch_size
    out += [(f"micro-batch {mb} -> {b}", {"micro_batch_size": b}) for b in (mb // 2, mb * 2)
            if b >= 1 and b != mb and not (b < mb and mb % 2)]
    if plan.recompute in RECOMPUTE_LADDER:
        i = RECOMPUTE_LADDER.index(plan.recompute)
        out += [(f"recompute {plan.recompute.value} -> {r.value}", {"recompute": r, "recompute_num_layers": 0})
                for r in RECOMPUTE_LADDER[max(0, i - 1):i + 2] if r != plan.recompute]
    z = plan.sharding_stage
    out += [(f"ZeRO stage {z} -> {s}", {"zero_stage": s, "distributed_optimizer": s >= 1})
            for s in (z - 1, z + 1) if 0 <= s <= 3]
    return out


def knob_steps(plan: ParallelPlan, moe: bool) -> List[Tuple[str, str, Optional[Dict[str, Any]]]]:
    """(knob, change, plan fields to replace or None when no dp keeps the GPUs) of every step around ``plan``."""
    out: List[Tuple[str, str, Optional[Dict[str, Any]]]] = []
    for knob in ("tp", "pp", "ep", "cp"):
        if knob == "ep" and not moe:
            continue
        out += [(knob, change, fields) for change, fields in _degree_steps(plan, knob)]
    out += [("vp", change, fields) for change, fields in _vp_steps(plan)]
    for change, fields in _ladder_steps(plan):
        out.append((change.split(" ")[0] if not change.startswith("ZeRO") else "ZeRO stage", change, fields))
    return out


def sensitivity(ctx: Any, best_plan: ParallelPlan, best_metrics: Dict[str, float]) -> List[Step]:
    """One :class:`Step` per step of :func:`knob_steps` around ``best_plan`` (the search's context ``ctx``: its
    evaluator simulates), its time to train and cost relative to ``best_metrics``."""
    model = ctx.workload.model
    steps: List[Step] = []
    for knob, change, fields in knob_steps(best_plan, model.is_moe):
        if fields is None:
            steps.append(Step(knob, change, reason="no data-parallel degree keeps the GPU count"))
            continue
        try:
            plan = canonical(dataclasses.replace(best_plan, **fields), model)
            outcome = ctx.evaluator.evaluate(plan)
        except (ConfigError, ValueError) as err:
            steps.append(Step(knob, change, reason=_short(str(err))))
            continue
        if not outcome.feasible:
            steps.append(Step(knob, change, reason=_short(outcome.reason or "infeasible")))
            continue
        m = outcome.metrics
        steps.append(Step(knob, change, _pct(m["time_to_train_s"], best_metrics["time_to_train_s"]),
                          _pct(m["cost_usd"], best_metrics["cost_usd"])))
    return steps


def _pct(value: float, ref: float) -> float:
    return (value / ref - 1.0) * 100.0


def _short(reason: str) -> str:
    one = re.sub(r" \([^()]*\)$", "", " ".join(reason.split()))  # its closing remark in parentheses dropped
    return one if len(one) <= REASON_CHARS else one[:REASON_CHARS - 3] + "..."


def table_lines(steps: List[Step]) -> List[str]:
    """The steps as a small table: knob, step, time and cost change (or why the step is no plan)."""
    if not steps:
        return []
    width = max(len(s.change) for s in steps)
    out = [f"  {'step':<{width}}  {'time':>8}  {'cost':>8}"]
    for s in steps:
        if s.reason is not None:
            out.append(f"  {s.change:<{width}}  {'-':>8}  {'-':>8}  ({s.reason})")
        else:
            out.append(f"  {s.change:<{width}}  {s.time_pct:>+7.1f}%  {s.cost_pct:>+7.1f}%")
    return out
