"""The worker loop of an Optuna search: ask for a trial, evaluate it, tell its outcome (Optuna's ask-and-tell
interface), until ``search.n_trials`` trials of the study have finished, over all its workers.

Each turn, under the study lock (:func:`vtrain.search.storage.study_lock`, a kernel ``flock`` that a killed
holder drops at once):

1. a trial whose worker is gone (:func:`vtrain.search.ledger.abandoned`: its process on this host no longer
   exists, it has no worker record, or it has been held longer than ``search.stale_trial_s``) is taken over:
   this worker records itself in it and runs the objective on it (``optuna.trial.Trial(study, trial_id)``);
   the plan the dead worker drew is read back from the trial, so a killed worker's trial ends COMPLETE or
   PRUNED like any other, never FAIL, and no plan is drawn twice for one trial;
2. else, while fewer than ``n_trials`` trials are finished or in flight, ``study.ask()`` (which pops an
   enqueued trial first) and the worker records itself, in the same hold of the lock, so a trial is never
   started over the budget;
3. else the rest of the budget is held by other workers' trials in flight: wait for them (or their death).

The outcome is told with ``skip_if_finished=True``: a slow worker whose trial another worker took over as
stale drops its own outcome (the other worker's is stored). With a database server (no file lock) the
budget test follows the trial number (:func:`vtrain.search.ledger.in_budget`); a trial past it ends PRUNED
with its reason and is counted nowhere.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from vtrain.search import ledger as lg
from vtrain.search.phases import Phases
from vtrain.search.samplers import make_sampler, trial_seed, worker_salt
from vtrain.search.storage import StorageSpec, has_lock, study_lock
from vtrain.search.study import RESULT, Objective

WAIT_S = 0.02  # between looks at a study whose budget is held by other workers' trials in flight
TAKEN_OVER = "vtrain.taken_over"  # user attr: the worker record of the dead worker a trial was taken from


class Loop:
    """Ask, evaluate and tell until ``n_trials`` trials of the study have finished (all workers together)."""

    def __init__(self, ctx: Any, search: Any, spec: StorageSpec, study: optuna.Study,
                 on_trial: Optional[Callable[[FrozenTrial], None]] = None) -> None:
        self.ctx, self.search, self.spec, self.study = ctx, search, spec, study
        self.on_trial = on_trial  # each finished trial of this worker (e.g. to MLflow while the search runs)
        self.n_trials = int(search.n_trials)
        self.objective = Objective(ctx, spec, self.n_trials)
        self.phases = Phases(ctx, search, self.n_trials)
        self.salt = worker_salt(search)
        self.stale_s = float(search.stale_trial_s)
        self.locked = has_lock(spec)
        self.taken_over = 0  # trials of dead workers this worker finished
        self.bar: Any = None

    def _sampler_for(self, trials: Sequence[FrozenTrial], number: Optional[int]) -> None:
        """The sampler of the trial about to be handed out (``number``: a trial taken over; None: a new one),
        seeded from the finished count and, only while another live worker holds a trial, this worker's salt.
        Chosen under the study lock from the trials read in the same hold, with the takeover's own test of a
        live worker: a trial a killed process left without its worker record is no other worker's, however
        young (its own replacement draws it, and must draw what the uninterrupted study drew)."""
        k = sum(1 for t in trials if t.state in lg.FINISHED and lg.counted(t))
        salt = self.salt if lg.others_running(trials, number, self.locked, self.stale_s) else 0
        self.study.sampler = make_sampler(self.search, trial_seed(int(self.search.seed), k, salt),
                                          self.objective.accept)

    def _plan(self, force: bool = False) -> None:
        if force or self.phases.due(self.study):
            self.objective.sync(self.study)
            with study_lock(self.spec):
                self.phases.plan(self.study)

    def _left(self, trials: Sequence[FrozenTrial]) -> Optional[FrozenTrial]:
        """The first abandoned trial, if any (under the study lock)."""
        here = lg.me()
        for t in trials:
            w = t.user_attrs.get(lg.WORKER) or {}
            ours = t.state == TrialState.RUNNING and (w.get("host"), w.get("pid")) == (here["host"], here["pid"])
            if ours or lg.abandoned(t, self.locked, self.stale_s):  # ours: this process evaluates none now
                return t
        return None

    def _take(self, t: FrozenTrial) -> optuna.Trial:
        """Take over the abandoned trial ``t`` (under the study lock)."""
        dead = t.user_attrs.get(lg.WORKER) or "no worker record"  # read first: ``t`` is the storage's own copy,
        trial = optuna.trial.Trial(self.study, t._trial_id)  # which the next write updates in place
        trial.set_user_attr(lg.WORKER, lg.me())
        trial.set_user_attr(TAKEN_OVER, dead)
        self.taken_over += 1
        return trial

    def _ask(self) -> Optional[optuna.Trial]:
        """The next trial to evaluate; None once the study has ``n_trials`` finished trials."""
        while True:
            with study_lock(self.spec):
                trials = self.study.get_trials(deepcopy=False)
                left = self._left(trials)
                if left is not None:
                    self._sampler_for(trials, left.number)
                    return self._take(left)
                finished = sum(1 for t in trials if t.state in lg.FINISHED and lg.counted(t))
                running = sum(1 for t in trials if t.state == TrialState.RUNNING)
                if finished >= self.n_trials:
                    return None
                if finished + running < self.n_trials:
                    self._sampler_for(trials, None)
                    trial = self.study.ask()
                    trial.set_user_attr(lg.WORKER, lg.me())
                    return trial
            time.sleep(WAIT_S)  # the rest of the budget is in flight in other workers

    def _evaluate(self, trial: optuna.Trial) -> FrozenTrial:
        """Run the objective on ``trial`` and tell its outcome; returns the stored trial."""
        if not self.locked and not lg.in_budget(self.study, trial.number, self.n_trials):
            reason = f"over budget: search.n_trials={self.n_trials} reached by other workers"
            trial.set_user_attr(lg.OVER_BUDGET, True)
            trial.set_user_attr(RESULT, {"reason": reason})
            return self.study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
        try:
            values = self.objective(trial)
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker ended it under us (stale): go on
            return self.study.get_trials(deepcopy=False)[trial.number]
        except optuna.TrialPruned:
            return self.study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
        except BaseException:
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            raise
        return self.study.tell(trial, list(values), skip_if_finished=True)

    def _after(self, t: FrozenTrial) -> None:
        w, here = t.user_attrs.get(lg.WORKER) or {}, lg.me()
        mine = (w.get("host"), w.get("pid")) == (here["host"], here["pid"])
        if self.on_trial is not None and mine and lg.counted(t):  # not a trial another worker took from us
            self.on_trial(t)
        if self.bar is not None:
            self.bar.update(1)
        if lg.finished_count(self.study) < self.n_trials:
            self._plan()

    def run(self, progress_bar: bool) -> None:
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        done = lg.finished_count(self.study)
        if done >= self.n_trials:
            return
        self._plan(force=True)
        if progress_bar and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.n_trials, initial=done, unit="trial", desc="search", file=sys.stderr)
        try:
            while True:
                trial = self._ask()
                if trial is None:
                    return
                self._after(self._evaluate(trial))
        finally:
            if self.bar is not None:
                self.bar.close()
