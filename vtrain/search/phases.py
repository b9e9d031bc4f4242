"""The fixed plan of a study, kept in the study so that a resumed or shared study follows it.

1. Seeds: the first generation is drawn from the valid plans whose memory lower bound fits the GPU
   (:func:`seed_plans`, deterministic in ``search.seed``): NSGA-II's random first generation otherwise
   spends most trials on plans that cannot fit (~86% of GPT-3 175B x 1,024 A100). Each is enqueued with
   the user attr ``vtrain.slot = seed:<i>``.
2. Evolution: sampler trials until ``n_trials - reserve`` trials have finished.
3. Refinement rounds (:mod:`vtrain.search.refine`): when round ``r`` is due, its neighbours of the
   current front are computed once and stored in the study (user attr ``vtrain.round.<r>``), then
   enqueued as ``vtrain.slot = round<r>:<i>``.

:meth:`Phases.plan` is idempotent and runs under the study lock: it enqueues every slot of a due phase
that no WAITING, RUNNING or finished trial holds, within the budget no trial holds yet (so no trial is
left WAITING when the study ends). A killed process's slot (its trial FAILed) is enqueued
again, a half-enqueued round is completed, and two workers never enqueue one slot twice.
"""
from __future__ import annotations

import random
from typing import Any, Dict, List, Sequence, Set, Tuple

import optuna
from optuna.trial import TrialState

from vtrain.search.encoding import trial_params
from vtrain.search.ledger import SLOT, counted, finished_count
from vtrain.search.space import enumerate_plans
from vtrain.sim.memory_margin import usable_bytes
from vtrain.sim.stage_memory import memory_lower_bound_bytes

ROUND = "vtrain.round."


def seed_plans(ctx: Any, size: int, seed: int, max_draws: int = 20000) -> List[Dict[str, Any]]:
    """Trial parameters of ``size`` distinct plans drawn at random (seeded) from the valid plans whose memory
    lower bound fits the GPU (no simulation): rejection sampling over the parameter choices, falling back
    to enumerating the whole space when few plans qualify."""
    from vtrain.search.encoding import choices, decode
    from vtrain.search.plans import plan_key
    from vtrain.search.space import Infeasible

    cap = usable_bytes(ctx.workload.cluster)  # the memory margin (cluster.usable_hbm_fraction)
    rng = random.Random(seed)
    options = choices(ctx.space)
    picks: Dict[Any, Any] = {}
    for _ in range(max_draws):
        if len(picks) >= size:
            break
        try:
            plan = decode(ctx.space, {k: rng.choice(v) for k, v in options.items()})
        except Infeasible:
            continue
        if plan_key(plan) not in picks and memory_lower_bound_bytes(ctx.workload, plan) <= cap:
            picks[plan_key(plan)] = plan
    if len(picks) < size:
        fitting = [p for p in enumerate_plans(ctx.space) if memory_lower_bound_bytes(ctx.workload, p) <= cap]
        return [trial_params(ctx.space, p) for p in random.Random(seed).sample(fitting, min(size, len(fitting)))]
    return [trial_params(ctx.space, p) for p in picks.values()]


class Phases:
    def __init__(self, ctx: Any, search: Any, n_trials: int) -> None:
        sampler = str(search.sampler)
        self.ctx = ctx
        self.n_trials = n_trials
        self.guided = sampler in ("nsgaii", "tpe")
        self.seed_size = min(int(search.population_size), n_trials) if self.guided and bool(search.seed_population) \
            else 0
        self.seed = int(search.seed)
        rounds = int(search.local_search_rounds) if self.guided else 0
        reserve = int(n_trials * float(search.local_search_fraction)) if rounds > 0 else 0
        self.rounds = min(rounds, reserve)
        self.reserve = reserve if self.rounds else 0
        self._seeds: List[Dict[str, Any]] | None = None

    def windows(self) -> List[Tuple[int, int, int]]:
        """(round, finished count that starts it, finished count it runs to)."""
        base = self.n_trials - self.reserve
        return [(r, base + r * self.reserve // self.rounds, base + (r + 1) * self.reserve // self.rounds)
                for r in range(self.rounds)]

    def seeds(self) -> List[Dict[str, Any]]:
        """Twice the generation: a seed that turns out not to fit (simulated peak above the bound) is
        replaced by the next one, so the first generation is complete without random plans."""
        if self._seeds is None:
            self._seeds = seed_plans(self.ctx, 2 * self.seed_size, self.seed) if self.seed_size else []
        return self._seeds

    def _seeds_wanted(self, study: optuna.Study) -> int:
        """Seed slots the study should hold: the generation plus one for each seed that was pruned."""
        pruned = sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
                     if str(t.user_attrs.get(SLOT, "")).startswith("seed:"))
        return self.seed_size + pruned if self.seed_size else 0

    def due(self, study: optuna.Study) -> bool:
        """Cheap test (no lock): a phase may need enqueueing."""
        finished = finished_count(study)
        attrs = study.user_attrs
        if self.seed_size and finished < self.n_trials:
            held = sum(s.startswith("seed:") for s in self._held(study))
            if held < min(self._seeds_wanted(study), 2 * self.seed_size):
                return True
        return any(finished >= start and f"{ROUND}{r}" not in attrs for r, start, _ in self.windows())

    @staticmethod
    def _held(study: optuna.Study) -> Set[str]:
        return {str(t.user_attrs[SLOT]) for t in study.get_trials(deepcopy=False)
                if t.state != TrialState.FAIL and SLOT in t.user_attrs}

    @staticmethod
    def _enqueue(study: optuna.Study, prefix: str, params: Sequence[Dict[str, Any]], held: Set[str],
                 room: int) -> int:
        """Enqueue the slots not held, at most ``room`` (the budget not yet taken by a trial)."""
        n = 0
        for i, p in enumerate(params):
            slot = f"{prefix}:{i}"
            if n >= room:
                break
            if slot not in held:
                study.enqueue_trial(p, user_attrs={SLOT: slot}, skip_if_exists=False)
                n += 1
        return n

    def plan(self, study: optuna.Study) -> int:
        """Enqueue what is due and not held by a trial; returns how many trials were enqueued."""
        held = self._held(study)
        # a trial enqueued past the budget would be left WAITING when the study ends
        room = self.n_trials - sum(1 for t in study.get_trials(deepcopy=False) if counted(t))
        n = 0
        want = self._seeds_wanted(study)
        if want and sum(s.startswith("seed:") for s in held) < want and finished_count(study) < self.n_trials:
            n += self._enqueue(study, "seed", self.seeds()[:want], held, room)
        finished = finished_count(study)
        attrs = dict(study.user_attrs)
        for r, start, target in self.windows():
            if finished < start:
                break
            key = f"{ROUND}{r}"
            if key not in attrs:
                attrs[key] = self._candidates(max(0, target - finished))
                study.set_user_attr(key, attrs[key])
            n += self._enqueue(study, f"round{r}", attrs[key], held, room - n)
        return n

    def _candidates(self, limit: int) -> List[Dict[str, Any]]:
        from vtrain.search.refine import candidates, front_plans

        if limit <= 0:
            return []
        ctx = self.ctx
        plans = candidates(ctx.evaluator, front_plans(ctx.evaluator, ctx.directions, ctx.constraints), limit)
        return [trial_params(ctx.space, p) for p in plans]
