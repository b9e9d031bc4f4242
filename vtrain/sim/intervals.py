"""Calibrated 80% prediction intervals of the iteration time (and so of time to train and cost).

Method: split-conformal prediction (Vovk, Gammerman & Shafer, "Algorithmic Learning in a Random World",
2005; Lei, G'Sell, Rinaldo, Tibshirani & Wasserman, "Distribution-free predictive inference for
regression", JASA 2018) on log-ratio residuals r = log(measured / predicted) of out-of-sample
predictions: each source's rows predicted by the calibration fitted without that source
(vtrain/calibration/loso.py, vtrain/calibration/intervals_fit.py). The equal-tailed
interval takes the k_lo-th and k_hi-th smallest residual, k_lo = floor((n+1)·α/2) and
k_hi = ceil((n+1)·(1-α/2)) (α = 0.2): under exchangeability each tail misses at most α/2 of new runs.

Conditioning (a Mondrian conformal predictor, Vovk et al. 2005: quantiles per class): a plan's class is
``constants/family/nodes/bound`` — constants fitted end to end to this GPU and stack or transferred,
dense or MoE, single node or multi-node, host- or GPU-bound. A class with fewer than ``min_class_n``
residuals falls back to its parent (``constants/family/nodes``, ...), widened to every finite interval
on the way (never narrower than a smaller class's own data supports). A plan with a feature that fewer
than 9 validation rows carry (a GPU, precision or schedule; or a constants/family pair without data:
MoE on fitted constants) gets the widest interval of the table and a note.

The table is package data (vtrain/data/intervals.json, written by ``python -m vtrain task=calibrate
calibrate.scope=all calibrate.write=true``): read once, on
first use. Everything else here is pure and cheap (a few dict look-ups per simulation).
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from importlib import resources
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

LEVEL = 0.8  # the 80% interval
# host-bound: the critical stage's GPU waits on the host for >= 20% of the iteration. Not tuned: on the
# A100 set the residual quantiles differ by < 2 points for any threshold from 5% to 30% (2026-12)
HOST_BOUND_FRACTION = 0.2
# the (gpu, stack) pair whose constants task=calibrate fitted to iteration times (conf/gpu/a100_80gb.yaml
# provenance): the only one whose residuals come from cross-validation
FITTED_END_TO_END: FrozenSet[Tuple[str, str]] = frozenset({("a100_80gb", "megatron_deepspeed_2022"),
                                                            ("a100_80gb", "megatron_lm_2021")})
TABLE_FILE = "intervals.json"
UNVALIDATED = "unvalidated"


def _order_stats(n: int, level: float) -> Tuple[int, int]:
    """(k_lo, k_hi), 1-based order statistics of the equal-tailed split-conformal interval (exact
    arithmetic: ``(n+1)·0.9`` must not round up past an integer)."""
    tail = (1 - Fraction(level).limit_denominator(10_000)) / 2
    return math.floor((n + 1) * tail), math.ceil((n + 1) * (1 - tail))


def min_finite_n(level: float = LEVEL) -> int:
    """The fewest residuals that give a finite interval (9 at 80%)."""
    n = 1
    while True:
        lo, hi = _order_stats(n, level)
        if lo >= 1 and hi <= n:
            return n
        n += 1


def conformal_quantiles(residuals: Sequence[float], level: float = LEVEL) -> Optional[Tuple[float, float]]:
    """(q_lo, q_hi) of the split-conformal interval at ``level``; None when too few residuals for a finite one."""
    r = sorted(float(x) for x in residuals)
    lo, hi = _order_stats(len(r), level)
    if lo < 1 or hi > len(r):
        return None
    return r[lo - 1], r[hi - 1]


def regime_key(gpu: str, stack: str, transferred: bool, moe: bool, multi_node: bool, host_fraction: float) -> str:
    """The most specific class of a plan: ``constants/family/nodes/bound``."""
    constants = "fitted" if (gpu, stack) in FITTED_END_TO_END and not transferred else "transferred"
    return (f"{constants}/{'moe' if moe else 'dense'}/{'multi_node' if multi_node else 'single_node'}/"
            f"{'host_bound' if host_fraction >= HOST_BOUND_FRACTION else 'gpu_bound'}")


def lineage(key: str) -> List[str]:
    """The class and its parents, most specific first: a/b/c/d, a/b/c, a/b, a."""
    parts = key.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


@dataclass(frozen=True)
class Interval:
    lo_factor: float  # lower end / prediction
    hi_factor: float
    regime: str  # the class whose residuals the interval rests on (or "unvalidated")
    note: str = ""


def resolve(key: str, classes: Mapping[str, Mapping[str, Any]], min_class_n: int) -> Optional[Tuple[float, float, str]]:
    """(q_lo, q_hi, class used) of a leaf class: its first ancestor with >= ``min_class_n`` residuals,
    widened to every more specific class with a finite interval; None when no ancestor qualifies."""
    path = lineage(key)
    chosen = next((k for k in path if classes.get(k, {}).get("n", 0) >= min_class_n), None)
    if chosen is None:
        return None
    lo, hi = float(classes[chosen]["q_lo"]), float(classes[chosen]["q_hi"])
    for k in path[:path.index(chosen)]:
        c = classes.get(k)
        if c is not None and c.get("q_lo") is not None:
            lo, hi = min(lo, float(c["q_lo"])), max(hi, float(c["q_hi"]))
    return lo, hi, chosen


def widest(classes: Mapping[str, Mapping[str, Any]]) -> Tuple[float, float]:
    """The envelope of every finite class interval: for plans without validation data ((0, 0) for a table
    without classes)."""
    finite = [c for c in classes.values() if c.get("q_lo") is not None]
    if not finite:
        return 0.0, 0.0
    return min(float(c["q_lo"]) for c in finite), max(float(c["q_hi"]) for c in finite)


def factors(q_lo: float, q_hi: float) -> Tuple[float, float]:
    """Log-ratio quantiles as (lo, hi) factors of the prediction, widened to contain the prediction itself
    (a biased class can have both quantiles on one side; widening never lowers coverage)."""
    return min(1.0, math.exp(q_lo)), max(1.0, math.exp(q_hi))


class IntervalTable:
    """The fitted quantile table (see the module docstring), with per-class look-ups memoised."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.classes: Mapping[str, Mapping[str, Any]] = data["classes"]
        self.min_class_n = int(data["min_class_n"])
        self.validated: Dict[str, FrozenSet[str]] = {k: frozenset(v) for k, v in data["validated"].items()}
        self.widest = widest(self.classes)
        self._cache: Dict[str, Interval] = {}

    def unvalidated(self, gpu: str, precision: str, schedule: str, key: str) -> List[str]:
        """What of the plan too few validation rows have (empty: everything has data; the table lists as
        validated the values at least min_finite_n() rows carry)."""
        out = [f"{name}={value}" for name, value in (("gpu", gpu), ("precision", precision), ("schedule", schedule))
               if value not in self.validated.get(name, frozenset())]
        family = lineage(key)[-2]
        if self.classes.get(family, {}).get("n", 0) == 0:
            out.append(f"{family.replace('/', ' constants, ')} models")
        return out

    def interval(self, gpu: str, precision: str, schedule: str, key: str) -> Interval:
        cache_key = f"{gpu}|{precision}|{schedule}|{key}"
        hit = self._cache.get(cache_key)
        if hit is not None:
            return hit
        missing = self.unvalidated(gpu, precision, schedule, key)
        resolved = None if missing else resolve(key, self.classes, self.min_class_n)
        if resolved is None:
            lo, hi = factors(*self.widest)
            what = ", ".join(missing) or key
            out = Interval(lo, hi, UNVALIDATED,
                           f"interval: fewer than {min_finite_n()} validation rows for {what}; the 80% interval is "
                           f"the widest of any validated class (x{lo:.2f} to x{hi:.2f}), not a calibrated one")
        else:
            lo, hi = factors(resolved[0], resolved[1])
            out = Interval(lo, hi, resolved[2])
        self._cache[cache_key] = out
        return out


@functools.lru_cache(maxsize=1)
def shipped_table() -> IntervalTable:
    """vtrain/data/intervals.json, read once."""
    text = (resources.files("vtrain") / "data" / TABLE_FILE).read_text(encoding="utf-8")
    return IntervalTable(json.loads(text))
