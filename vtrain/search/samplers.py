"""Optuna samplers, one per trial, seeded from the study so that a resumed study draws what an
uninterrupted one would have drawn.

A sampler's random generator advances with every draw, so a study resumed after a kill would start it
again from ``search.seed`` and draw different plans than the uninterrupted run. Instead, the sampler of
each trial is built with the seed ``hash(search.seed, k, salt)``, where ``k`` is the number of finished
(COMPLETE + PRUNED) trials when the trial is asked: the trial a killed process left RUNNING is taken
over with the same ``k``, so it draws the same plan. Everything else NSGA-II uses (generations, parent
populations) is kept in the study by Optuna itself. ``salt`` is 0 for a worker alone on its study and the
worker's own number while another live worker holds a trial (two workers must not draw the same plans):
see :func:`worker_salt`. Both are read under the study lock in the hold that hands the trial out
(:meth:`vtrain.search.loop.Loop._sampler_for`), where a trial left without a worker record is a dead
worker's: counted as a live one, it gave the resumed trial a salt and another plan (issue 44's flake).
"""
from __future__ import annotations

import hashlib
import os
import random
import socket
import warnings
from typing import Any, Callable, Dict, List, Optional

import optuna
from optuna.trial import FrozenTrial

from vtrain.errors import ConfigError
from vtrain.search.operators import FeasibleChildren, in_plan_order

Accept = Callable[[Dict[str, Any]], bool]


def trial_seed(seed: int, k: int, salt: int = 0) -> int:
    """A 32-bit seed from (search seed, finished-trial count, worker salt)."""
    digest = hashlib.blake2b(f"{seed}:{k}:{salt}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def worker_salt(search: Any) -> int:
    """This worker's number + 1: ``search.worker_index``, else a SLURM task or Hydra job number, else
    one derived from host and process id (unique among the workers of a study)."""
    index = int(search.get("worker_index", -1)) if hasattr(search, "get") else -1
    if index >= 0:
        return index + 1
    for var in ("SLURM_ARRAY_TASK_ID", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var]) + 1 + 1_000_000
    text = f"{socket.gethostname()}:{os.getpid()}"
    return 2_000_000 + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=3).digest(), "little")


class CanonicalNSGAIISampler(optuna.samplers.NSGAIISampler):
    """NSGA-II whose populations are listed in plan order, not trial order.

    Optuna lists a generation's trials by trial number, and its elite selection (stable sorts by rank
    and crowding distance) and the child strategy's parent draws depend on that order. A study resumed
    after a kill re-runs the killed trial's slot after the ones queued behind it, so the same set of
    trials comes in another order and the search drifts (seen: a resumed 80-trial study found another
    front). Listing them with :func:`~vtrain.search.operators.in_plan_order` makes each generation's parents
    a function of the set of its trials."""

    @classmethod
    def _get_generation_key(cls) -> str:  # Optuna's own keys, so studies stored before this class resume
        return optuna.samplers.NSGAIISampler._get_generation_key()

    @classmethod
    def _get_parent_cache_key_prefix(cls) -> str:
        return optuna.samplers.NSGAIISampler._get_parent_cache_key_prefix()

    def get_population(self, study: optuna.Study, generation: int) -> List[FrozenTrial]:
        return in_plan_order(super().get_population(study, generation))

    def get_parent_population(self, study: optuna.Study, generation: int) -> List[FrozenTrial]:
        return in_plan_order(super().get_parent_population(study, generation))


def make_sampler(search: Any, seed: int, accept: Optional[Accept]) -> optuna.samplers.BaseSampler:
    """The configured sampler with this trial's ``seed``; NSGA-II gets the filtering offspring strategy."""
    name = str(search.sampler)
    with warnings.catch_warnings():  # child_generation_strategy / multivariate TPE are "experimental" features
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "nsgaii":
            children = None
            if bool(search.filter_offspring) and accept is not None:
                children = FeasibleChildren(accept, random.Random(seed), float(search.crossover_prob),
                                            None if search.mutation_prob is None else float(search.mutation_prob))
            return CanonicalNSGAIISampler(
                population_size=int(search.population_size), seed=seed, crossover_prob=float(search.crossover_prob),
                mutation_prob=None if search.mutation_prob is None else float(search.mutation_prob),
                child_generation_strategy=children)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                              n_startup_trials=max(1, int(search.population_size) // 2))
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"search.sampler={name}: must be one of nsgaii, tpe, random, grid")
