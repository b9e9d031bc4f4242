"""The 80% prediction-interval table (vtrain/data/intervals.json) fitted on leave-one-source-out residuals.

Each row's residual is r = log(measured / predicted) with its prediction from the calibration fitted without
its source (:func:`vtrain.calibration.loso.loso`): every residual is out of sample, as a new user's table is.
The table is split-conformal per regime class (:mod:`vtrain.sim.intervals`: Vovk et al. 2005; Lei et al. 2018).
Its coverage is measured nested, a whole source at a time: the table is refitted without the source and the
source's rows are checked against the intervals it gives them.
"""
from __future__ import annotations

import datetime
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from vtrain.sim import intervals as iv

# a class needs >= 20 residuals to stand alone: each 10% tail then holds >= 2 of them, and the conformal
# coverage is at most 80% + 2/(n+1) < 90%; smaller classes widen their parent's interval instead
MIN_CLASS_N = 20
FEATURES = ("gpu", "precision", "schedule")


@dataclass(frozen=True)
class Residual:
    source: str
    leaf: str
    gpu: str
    precision: str
    schedule: str
    measured_s: float
    predicted_s: float

    @property
    def r(self) -> float:
        return math.log(self.measured_s / self.predicted_s)


def residuals(sources: Sequence[Any], held_out_s: Mapping[str, np.ndarray]) -> List[Residual]:
    """Every row of ``sources`` with its held-out prediction (``held_out_s``: per source name)."""
    out = []
    for s in sources:
        for w, leaf, m, p in zip(s.workloads, s.leaves, s.measured_s, held_out_s[s.name]):
            out.append(Residual(s.name, leaf, w.cluster.gpu.name, w.plan.precision.value, w.plan.schedule.value,
                                float(m), float(p)))
    return out


def fit_classes(rows: Sequence[Residual]) -> Dict[str, Dict[str, Any]]:
    """Per class and parent class: n and the split-conformal quantiles of its residuals."""
    by: Dict[str, List[float]] = defaultdict(list)
    for row in rows:
        for k in iv.lineage(row.leaf):
            by[k].append(row.r)
    out: Dict[str, Dict[str, Any]] = {}
    for k in sorted(by):
        q = iv.conformal_quantiles(by[k])
        out[k] = {"n": len(by[k]), "q_lo": None if q is None else round(q[0], 5),
                  "q_hi": None if q is None else round(q[1], 5)}
    return out


def validated(rows: Sequence[Residual]) -> Tuple[Dict[str, List[str]], Dict[str, Dict[str, int]]]:
    """(validated values, rows per value) of each feature: a value needs >= min_finite_n() rows."""
    counts = {k: Counter(getattr(r, k) for r in rows) for k in FEATURES}
    return ({k: sorted(v for v, n in c.items() if n >= iv.min_finite_n()) for k, c in counts.items()},
            {k: dict(sorted(c.items())) for k, c in counts.items()})


def lookup_table(rows: Sequence[Residual]) -> iv.IntervalTable:
    """The table a simulation would use, fitted on ``rows``."""
    return iv.IntervalTable({"classes": fit_classes(rows), "min_class_n": MIN_CLASS_N, "validated": validated(rows)[0]})


def nested(rows: Sequence[Residual]) -> List[Tuple[Residual, float, float, str]]:
    """Each row with the interval (lo and hi factors of the prediction, the class used) that the table refitted
    without the row's source gives it."""
    out = []
    for source in dict.fromkeys(r.source for r in rows):
        table = lookup_table([r for r in rows if r.source != source])
        for r in rows:
            if r.source == source:
                got = table.interval(r.gpu, r.precision, r.schedule, r.leaf)
                out.append((r, got.lo_factor, got.hi_factor, got.regime))
    return out


def nested_coverage(checked: Sequence[Tuple[Residual, float, float, str]]) -> Dict[str, Dict[str, Any]]:
    """Held-out coverage (of :func:`nested`'s intervals) per source, per class used, and over all rows: n,
    coverage %, median width (hi / lo)."""
    groups: Dict[str, List[Tuple[bool, float]]] = defaultdict(list)
    for r, lo, hi, regime in checked:
        hit = lo <= r.measured_s / r.predicted_s <= hi
        for k in (f"source:{r.source}", "all", regime):
            groups[k].append((hit, hi / lo))
    return {k: {"n": len(v), "coverage_pct": round(100.0 * sum(h for h, _ in v) / len(v), 1),
                "median_width_ratio": round(float(np.median([x for _, x in v])), 3)}
            for k, v in sorted(groups.items())}


def table_json(rows: Sequence[Residual], coverage: Dict[str, Dict[str, Any]], command: str) -> Dict[str, Any]:
    """intervals.json: the classes fitted on every residual, what they rest on, and the nested coverage."""
    valid, per_value = validated(rows)
    counts = Counter(r.source for r in rows)
    return {
        "method": "split-conformal (Vovk et al. 2005; Lei et al. 2018) on log(measured/predicted), equal-tailed "
                  "80%: k_lo = floor((n+1)*0.1), k_hi = ceil((n+1)*0.9) order statistics; per regime class "
                  "(vtrain/sim/intervals.py), classes under min_class_n residuals widen their parent's interval",
        "command": command,
        "generated": datetime.date.today().isoformat(),
        "level": iv.LEVEL, "min_class_n": MIN_CLASS_N, "host_bound_fraction": iv.HOST_BOUND_FRACTION,
        "data": {name: f"{n} rows; leave-one-source-out predictions (the calibration refitted without {name})"
                 for name, n in counts.items()},
        "validated_rule": f"a gpu, precision or schedule is validated when >= {iv.min_finite_n()} rows (the fewest "
                          "that give a finite 80% interval) carry it; rarer values still add their residuals "
                          "to their class, but a plan using them gets the unvalidated interval",
        "validated": valid,
        "rows_per_feature": per_value,
        "classes": fit_classes(rows),
        "heldout_coverage": coverage,
    }
