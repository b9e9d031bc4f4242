"""NSGA-II offspring filtered by the cheap checks before the expensive simulation.

Optuna's NSGA-II makes a child by crossover and mutation of two parents and only learns at
evaluation that it breaks a divisibility rule or cannot fit memory; in the GPT-3 175B x 1,024 A100
space ~7 of 8 valid plans exceed the memory lower bound, so most trials of a generation were
wasted. :class:`FeasibleChildren` re-draws a child (up to ``attempts`` times) until it decodes to a
valid plan whose memory lower bound fits and that has not been evaluated yet: rejection of
infeasible offspring, the simplest constraint-handling scheme for evolutionary algorithms
(Coello Coello 2002, "Theoretical and numerical constraint-handling techniques used with
evolutionary algorithms", Sec. 3). Only checks, no simulation, happen here.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Dict

import optuna

from vtrain.search.objective import Evaluator
from vtrain.search.space import Infeasible, plan_key, suggest_plan
from vtrain.sim.memory import memory_lower_bound_bytes


def promising(ev: Evaluator) -> Callable[[Dict[str, Any]], bool]:
    """``accept(params)``: the parameters decode to a new plan that may fit (True when unsure)."""
    w = ev.workload
    cap = w.cluster.gpu.hbm_capacity_bytes

    def accept(params: Dict[str, Any]) -> bool:
        try:
            plan = suggest_plan(optuna.trial.FixedTrial(params), ev.space)
        except Infeasible:
            return False
        except ValueError:  # a parameter the sampler leaves to independent sampling: cannot judge
            return True
        if plan_key(plan) in ev.cache:
            return False
        return memory_lower_bound_bytes(w, plan) <= cap

    return accept


def _uniform(rng: random.Random, dist: Any) -> Any:
    """A uniform draw from an Optuna distribution (what NSGA-II's default mutation does)."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return rng.choice(dist.choices)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return rng.randrange(dist.low, dist.high + 1, dist.step)
    return rng.uniform(dist.low, dist.high)


class FeasibleChildren:
    """Wraps an NSGA-II child-generation strategy: re-draw children that ``accept`` rejects.

    Optuna's default mutation drops a mutated parameter from the child, to be re-sampled uniformly
    at random when the trial runs; the child cannot be checked before that, so the dropped
    parameters are drawn here the same way (uniformly) and the child is returned complete.
    """

    def __init__(self, base: Callable[..., Dict[str, Any]], accept: Callable[[Dict[str, Any]], bool],
                 seed: int | None = None, attempts: int = 200) -> None:
        self.base = base
        self.accept = accept
        self.attempts = attempts
        self.rng = random.Random(seed)
        self.redraws = 0

    def _child(self, study: Any, search_space: Dict[str, Any], parents: Any) -> Dict[str, Any]:
        params = dict(self.base(study, search_space, parents))
        for name, dist in search_space.items():
            if name not in params:
                params[name] = _uniform(self.rng, dist)
        return params

    def __call__(self, study: Any, search_space: Dict[str, Any], parent_population: Any) -> Dict[str, Any]:
        params = self._child(study, search_space, parent_population)
        for _ in range(self.attempts - 1):
            if self.accept(params):
                break
            self.redraws += 1
            params = self._child(study, search_space, parent_population)
        return params


def filter_offspring(sampler: optuna.samplers.BaseSampler, accept: Callable[[Dict[str, Any]], bool],
                     seed: int | None = None) -> bool:
    """Install :class:`FeasibleChildren` on an NSGA-II sampler; False if this Optuna lacks the hook."""
    base = getattr(sampler, "_child_generation_strategy", None)
    if not isinstance(sampler, optuna.samplers.NSGAIISampler) or base is None:
        return False
    sampler._child_generation_strategy = FeasibleChildren(base, accept, seed)
    return True
