"""The Optuna side of a search: storage, samplers, resume, the objective and the trial loop.

- Storage: SQLite in the run directory (WAL, see :mod:`vtrain.tracking.sqlite_wal`) or any URL.
- Resume: a study of the same name in the same storage continues. Trials a killed process left
  RUNNING are marked FAIL first (a SIGKILLed trial has no heartbeat and would stay RUNNING forever).
- Budget: the study stops when its FINISHED trials (COMPLETE + PRUNED, FAIL excluded) reach
  ``search.n_trials``; a resumed study runs only the missing ones.
- De-duplication: a plan drawn again completes with the first trial's values (memoised) and the
  user attr ``duplicate_of``; infeasible plans are PRUNED with the reason in the user attr ``result``.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from vtrain.errors import ConfigError
from vtrain.search.objective import Evaluator, Outcome
from vtrain.search.space import Infeasible, plan_fields, plan_from_fields, plan_key, suggest_plan
from vtrain.tracking import sqlite_wal

SAMPLERS = ("nsgaii", "tpe", "random", "grid")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def storage_url(search: Any, out_dir: Path) -> str:
    return str(search.storage) if search.storage else f"sqlite:///{(out_dir / 'optuna.db').resolve()}"


def make_storage(url: str) -> optuna.storages.RDBStorage:
    sqlite_wal.install()
    path = sqlite_wal.sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as exc:  # bad URL, missing driver, unreachable server
        raise ConfigError(f"search.storage={url}: {str(exc).splitlines()[0]}") from None


def make_sampler(search: Any, n_objectives: int) -> optuna.samplers.BaseSampler:
    name, seed = str(search.sampler), int(search.seed)
    if name == "nsgaii":
        return optuna.samplers.NSGAIISampler(population_size=int(search.population_size), seed=seed,
                                             mutation_prob=search.mutation_prob,
                                             crossover_prob=float(search.crossover_prob))
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate/group are "experimental" since Optuna 2.2 / 2.8
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                              n_startup_trials=int(search.population_size) // 2)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"search.sampler={name} is not one of {', '.join(SAMPLERS)}")


def fail_stale_trials(study: optuna.Study) -> int:
    """Mark RUNNING trials FAIL (left by a killed process). Assumes one worker per study."""
    storage = study._storage  # the public BaseStorage API needs the storage object Optuna wraps
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_system_attr(t._trial_id, "fail_reason", "left RUNNING by an interrupted process")
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        n += 1
    return n


def open_study(name: str, storage: optuna.storages.RDBStorage, directions: Sequence[str],
               sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=storage, directions=list(directions), sampler=sampler,
                                load_if_exists=True)
    have = [d.name.lower() for d in study.directions]
    if have != list(directions):
        raise ConfigError(f"search.study_name={name} exists with directions {have}, not {list(directions)}: "
                          "choose another study name or the same search.objectives")
    return study


def outcome_of(t: FrozenTrial) -> Optional[Dict[str, Any]]:
    """The ``result`` user attr a finished trial carries (None for trials vtrain did not write)."""
    return t.user_attrs.get("result")


@dataclass
class StudyRun:
    study: optuna.Study
    new_trials: int
    stale_failed: int
    seconds_per_trial: float


class Objective:
    """``__call__(trial) -> objective values``; memoises plans through the :class:`Evaluator`."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev
        self.first_trial: Dict[Any, int] = {}
        self.seeded = 0  # enqueued trials still to run

    def preload(self, trials: Sequence[FrozenTrial]) -> None:
        """Seed the memo from a resumed study's finished trials (no re-simulation of known plans)."""
        for t in trials:
            res = outcome_of(t)
            if t.state not in FINISHED or not res or "plan" not in res or "duplicate_of" in res:
                continue
            plan = plan_from_fields(self.ev.space.base, res["plan"])
            key = plan_key(plan)
            self.first_trial.setdefault(key, t.number)
            values = tuple(t.values) if t.state == TrialState.COMPLETE else None
            self.ev.cache.setdefault(key, Outcome(plan, values, res.get("reason"), res.get("metrics", {})))

    def __call__(self, trial: optuna.Trial) -> Sequence[float]:
        if self.seeded:
            self.seeded -= 1
            _join_generation(trial)
        try:
            plan = suggest_plan(trial, self.ev.space)
        except Infeasible as err:
            trial.set_user_attr("result", {"reason": str(err)})
            raise optuna.TrialPruned(str(err)) from None
        key = plan_key(plan)
        result: Dict[str, Any] = {"plan": plan_fields(plan)}
        first = self.first_trial.setdefault(key, trial.number)
        if first != trial.number:
            result["duplicate_of"] = first
        out = self.ev.evaluate(plan)
        result["metrics"] = out.metrics
        if not out.feasible:
            result["reason"] = out.reason
            trial.set_user_attr("result", result)  # one storage write per trial
            raise optuna.TrialPruned(out.reason)
        trial.set_user_attr("result", result)
        assert out.values is not None
        return out.values


def _join_generation(trial: optuna.Trial) -> None:
    """Enqueued (seeded) trials skip the sampler, so NSGA-II never assigns them a generation and
    they would not count as its first population; assign it as the sampler would have."""
    from optuna.samplers._ga import BaseGASampler

    sampler = trial.study.sampler
    if isinstance(sampler, BaseGASampler):
        frozen = trial.study._storage.get_trial(trial._trial_id)
        if "fixed_params" in frozen.system_attrs:
            sampler.get_trial_generation(trial.study, frozen)


def run_study(study: optuna.Study, objective: Objective, n_trials: int, progress_bar: bool,
              on_trial: Optional[Callable[[FrozenTrial], None]] = None) -> StudyRun:
    """Run until the study holds ``n_trials`` finished trials."""
    import time

    stale = fail_stale_trials(study)
    done = study.get_trials(deepcopy=False, states=FINISHED)
    objective.preload(done)
    missing = max(0, n_trials - len(done))
    bar = None
    if progress_bar and sys.stderr.isatty() and missing:
        from tqdm import tqdm

        bar = tqdm(total=n_trials, initial=len(done), unit="trial", desc="search", file=sys.stderr)

    def callback(st: optuna.Study, t: FrozenTrial) -> None:
        if bar is not None:
            bar.update(1)
        if on_trial is not None:
            on_trial(t)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    try:
        if missing:
            study.optimize(objective, n_trials=missing, gc_after_trial=False,
                           callbacks=[optuna.study.MaxTrialsCallback(n_trials, states=FINISHED), callback])
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    return StudyRun(study, missing, stale, elapsed / missing if missing else 0.0)


def finished_trials(study: optuna.Study) -> List[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=FINISHED)
