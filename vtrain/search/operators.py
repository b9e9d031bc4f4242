"""NSGA-II offspring for plans: binary tournament, uniform crossover, uniform mutation, and a filter.

Passed to Optuna through the public ``NSGAIISampler(child_generation_strategy=...)`` hook. It does what
Optuna's default strategy does for categorical parameters — two parents by binary tournament under
constrained domination (Deb et al. 2002, Sec. V, with the constraint values trials carry from
``trial.set_constraint``), uniform crossover with ``crossover_prob``, each parameter mutated (re-drawn
uniformly) with ``mutation_prob`` (default 1 / number of parameters) — and then re-draws a child (up to
``attempts`` times) until it decodes to a valid plan whose memory lower bound fits and that no trial of
the study has claimed yet: rejection of infeasible offspring, the simplest constraint-handling scheme
for evolutionary algorithms (Coello Coello 2002, Sec. 3). In the GPT-3 175B x 1,024 A100 space ~7 of 8
valid plans exceed the memory bound, so unfiltered generations were mostly wasted. Only checks, no
simulation, happen here; the random generator is the trial's own (:mod:`vtrain.search.samplers`), so
a resumed study draws the same children as an uninterrupted one.
"""
from __future__ import annotations

import hashlib
import random
from typing import Any, Callable, Dict, List, Optional, Sequence

import optuna
from optuna.trial import FrozenTrial

from vtrain.search.ledger import CLAIM

Accept = Callable[[Dict[str, Any]], bool]


def _plan_rank(t: FrozenTrial) -> bytes:
    return hashlib.blake2b(str(t.user_attrs.get(CLAIM, "")).encode(), digest_size=8).digest()


def in_plan_order(trials: Sequence[FrozenTrial]) -> List[FrozenTrial]:
    """Trials in an order fixed by their claimed plans: a resumed study re-runs a killed trial's plan under
    a new, later number, so neither list order nor trial numbers are the same as in an uninterrupted
    study; the set of plans is. The order is a hash of the plan key (then values, then number, for trials
    of one plan), not the key's text: NSGA-II breaks ties by position, and the text would always favour
    one end of it ("tp=8" over "tp=1")."""
    return sorted(trials, key=lambda t: (_plan_rank(t), tuple(t.values or ()), t.number))


def _uniform(rng: random.Random, dist: Any) -> Any:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return rng.choice(dist.choices)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return rng.randrange(dist.low, dist.high + 1, dist.step)
    return rng.uniform(dist.low, dist.high)


def _violation(t: FrozenTrial) -> float:
    return sum(v for v in t.constraints.values() if v > 0)


def constrained_dominates(a: FrozenTrial, b: FrozenTrial, directions: Sequence[Any]) -> bool:
    """Deb's constrained domination: feasible beats infeasible, a smaller violation beats a larger one,
    and among feasible trials Pareto domination decides."""
    va, vb = _violation(a), _violation(b)
    if va > 0 or vb > 0:
        return va < vb
    sign = [1.0 if d == optuna.study.StudyDirection.MINIMIZE else -1.0 for d in directions]
    x = [s * v for s, v in zip(sign, a.values)]
    y = [s * v for s, v in zip(sign, b.values)]
    return all(p <= q for p, q in zip(x, y)) and any(p < q for p, q in zip(x, y))


class FeasibleChildren:
    """``(study, search_space, parent_population) -> params`` for ``NSGAIISampler``."""

    def __init__(self, accept: Accept, rng: random.Random, crossover_prob: float = 0.9,
                 mutation_prob: Optional[float] = None, swapping_prob: float = 0.5, attempts: int = 200) -> None:
        self.accept = accept
        self.rng = rng
        self.crossover_prob = crossover_prob
        self.mutation_prob = mutation_prob
        self.swapping_prob = swapping_prob
        self.attempts = attempts
        self.redraws = 0

    def _tournament(self, pool: List[FrozenTrial], directions: Sequence[Any]) -> FrozenTrial:
        if len(pool) == 1:
            return pool[0]
        a, b = self.rng.sample(pool, 2)
        if constrained_dominates(a, b, directions):
            return a
        if constrained_dominates(b, a, directions):
            return b
        return a if self.rng.random() < 0.5 else b

    def _child(self, directions: Sequence[Any], space: Dict[str, Any], parents: List[FrozenTrial]) -> Dict[str, Any]:
        p1 = self._tournament(parents, directions)
        rest = [p for p in parents if p.number != p1.number] or parents
        p2 = self._tournament(rest, directions)
        cross = self.rng.random() < self.crossover_prob
        mut = self.mutation_prob if self.mutation_prob is not None else 1.0 / max(1, len(space))
        child: Dict[str, Any] = {}
        for name, dist in space.items():
            src = p2 if cross and self.rng.random() < self.swapping_prob else p1
            value = src.params.get(name)
            if value is None or self.rng.random() < mut:
                value = _uniform(self.rng, dist)
            child[name] = value
        return child

    def __call__(self, study: optuna.Study, search_space: Dict[str, Any],
                 parent_population: List[FrozenTrial]) -> Dict[str, Any]:
        parents = in_plan_order(parent_population)  # the draw must not depend on list order or trial numbers
        directions = study.directions
        child = self._child(directions, search_space, parents)
        for _ in range(self.attempts - 1):
            if self.accept(child):
                break
            self.redraws += 1
            child = self._child(directions, search_space, parents)
        return child
