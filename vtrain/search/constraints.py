"""What a user plans under: a deadline, a budget, a memory head-room, a minimum MFU.

GPU counts (``search.gpus``, ``min_gpus``, ``max_gpus``) bound the plan space itself
(:class:`vtrain.search.space.PlanSpace`); the limits here are soft constraints on a simulated plan's
metrics. Each gives a *relative violation* (0 or less: satisfied; 0.1: 10% beyond the limit), which
goes to Optuna as ``trial.set_constraint`` (NSGA-II's constrained domination, Deb et al. 2002, Sec. V:
a near-miss beats a far miss, so infeasible children still guide the search) and filters the grid the
same way. :func:`binding` says how far each limit binds: the best plan with and without it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

DAY_S = 86400.0
GIB = 2**30


@dataclass(frozen=True)
class Limit:
    name: str  # the search.* field, e.g. "max_days"
    metric: str  # the metric it bounds (SI units, as in the trial metrics)
    bound: float  # in the metric's units
    upper: bool  # True: metric <= bound; False: metric >= bound
    setting: float  # the value as the user wrote it (days, USD, fraction)

    def violation(self, metrics: Mapping[str, float]) -> float:
        value = float(metrics.get(self.metric, float("inf") if self.upper else 0.0))
        return value / self.bound - 1.0 if self.upper else 1.0 - value / self.bound

    def describe(self, metrics: Mapping[str, float]) -> str:
        value = float(metrics.get(self.metric, float("nan")))
        share = value / self.bound if self.bound else float("nan")
        return f"search.{self.name}={self.setting:g}: {_fmt(self.metric, value)} ({100 * share:.0f}% of the limit)"


def _fmt(metric: str, value: float) -> str:
    if metric == "time_to_train_s":
        return f"{value / DAY_S:.1f} days"
    if metric == "cost_usd":
        return f"${value:,.0f}"
    if metric == "mfu":
        return f"MFU {100 * value:.1f}%"
    if metric == "peak_memory_gib":
        return f"{value:.1f} GiB/GPU"
    return f"{value:g}"


@dataclass(frozen=True)
class Constraints:
    limits: Tuple[Limit, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.limits)

    def violations(self, metrics: Mapping[str, float]) -> Dict[str, float]:
        return {lim.name: lim.violation(metrics) for lim in self.limits}

    def satisfied(self, metrics: Mapping[str, float], skip: Optional[str] = None) -> bool:
        return all(lim.violation(metrics) <= 0 for lim in self.limits if lim.name != skip)

    def text(self) -> str:
        return ", ".join(f"{lim.name}={lim.setting:g}" for lim in self.limits)


def from_search(search: Any, hbm_bytes: float) -> Constraints:
    """The active limits of a ``search`` config (already checked by :mod:`vtrain.search.settings`)."""
    limits: List[Limit] = []
    if search.get("max_days") is not None:
        limits.append(Limit("max_days", "time_to_train_s", float(search.max_days) * DAY_S, True,
                            float(search.max_days)))
    if search.get("max_cost_usd") is not None:
        limits.append(Limit("max_cost_usd", "cost_usd", float(search.max_cost_usd), True, float(search.max_cost_usd)))
    frac = float(search.get("max_memory_fraction", 1.0))
    if frac < 1.0:
        limits.append(Limit("max_memory_fraction", "peak_memory_gib", frac * hbm_bytes / GIB, True, frac))
    if search.get("min_mfu") is not None:
        limits.append(Limit("min_mfu", "mfu", float(search.min_mfu), False, float(search.min_mfu)))
    return Constraints(tuple(limits))


@dataclass(frozen=True)
class Binding:
    """One limit's effect on the best plan of an objective: the best plan without that limit."""

    limit: Limit
    at_best: str  # the limit's value at the constrained best plan
    without: Optional[Any]  # the best record when this limit alone is dropped (None: nothing better)
    change_pct: float  # how much better the objective gets without it (0: the limit does not bind)


def binding(records: Sequence[Any], constraints: Constraints, best: Any, key: Callable[[Any], Tuple[float, ...]]
            ) -> List[Binding]:
    """For each limit: the best record (by ``key``, smallest first) when that limit alone is dropped."""
    out = []
    for lim in constraints.limits:
        pool = [r for r in records if constraints.satisfied(r.metrics, skip=lim.name)]
        alt = min(pool, key=key) if pool else None
        base = key(best)[0]
        gain = 100 * (base - key(alt)[0]) / base if alt is not None and base else 0.0
        out.append(Binding(lim, lim.describe(best.metrics), alt if gain > 1e-9 else None, max(0.0, gain)))
    return out
