"""The Optuna side of a search: open the (possibly shared) study and evaluate a trial.

Optuna's public API: ``optuna.create_study``/``load_study``, ``enqueue_trial``, ``trial.set_constraint``,
``study.set_metric_names``, ``BaseGASampler.get_trial_generation`` and the
``NSGAIISampler(child_generation_strategy=...)`` hook; the ask-and-tell loop is :mod:`vtrain.search.loop`.

Per trial (:class:`Objective`): draw the plan; claim it in the shared :class:`~vtrain.search.ledger.Ledger`
(or take the claiming trial's stored result, Optuna FAQ's pattern for duplicate parameters: the plan is not
simulated again); simulate; set the constraint values; store the outcome in the user attr ``result`` (one
write).
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import optuna
from optuna.trial import FrozenTrial, TrialState

from vtrain.errors import ConfigError
from vtrain.search import ledger as lg
from vtrain.search.encoding import decode, suggest_plan
from vtrain.search.objective import Outcome
from vtrain.search.plans import plan_fields, plan_from_fields, plan_key
from vtrain.search.space import Infeasible
from vtrain.search.storage import StorageSpec, make_storage, study_lock
from vtrain.sim.memory_margin import usable_bytes
from vtrain.sim.stage_memory import memory_lower_bound_bytes

RESULT = "result"
OVER_BUDGET = lg.OVER_BUDGET
WAIT_FOR_OWNER_S = 60.0

SPACE = "vtrain.space"  # study user attribute: what the study searches (fingerprint, description)


def open_study(name: str, spec: StorageSpec, directions: Sequence[str], objectives: Sequence[str],
               space: Optional[Tuple[str, str, Dict[str, str]]] = None) -> optuna.Study:
    """Create or load the study; ``space`` = (fingerprint, description, fingerprint per part) of what it
    searches (model, cluster, stack, prices, plan space, objectives): a study that exists for another one is a
    one-line error naming the parts that differ, so that a resumed or shared study never mixes another
    search's trials into this one's results."""
    import warnings

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # no per-trial lines, no Ctrl-C traceback
    storage = make_storage(spec)
    try:
        try:  # load first: creating an existing study appends a failed create record to a journal
            study = optuna.load_study(study_name=name, storage=storage)
        except KeyError:  # no such study yet
            names: List[Any] = [str(d) for d in directions]  # Optuna's stubs want its Literal names
            study = optuna.create_study(study_name=name, storage=storage, directions=names, load_if_exists=True)
    except (ValueError, KeyError, TypeError) as exc:  # a journal Optuna cannot replay (JSON, missing fields)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"search.storage={spec.display}: cannot be read as an Optuna study ({first[:200]})") from None
    have = [d.name.lower() for d in study.directions]
    if have != list(directions):
        raise ConfigError(f"search.study_name={name}: the study exists with directions {have}, not "
                          f"{list(directions)}: choose another study name or the same search.objectives")
    if space is not None:
        have_space = study.user_attrs.get(SPACE)
        if have_space is None:
            study.set_user_attr(SPACE, {"fingerprint": space[0], "what": space[1], "parts": space[2]})
        elif have_space.get("fingerprint") != space[0]:
            had = have_space.get("parts") or {}
            differ = [k for k, v in space[2].items() if had.get(k) not in (None, v)]
            raise ConfigError(f"search.study_name={name}: the study in search.storage={spec.display} searches "
                              f"{have_space.get('what', 'another space')}; this run ({space[1]}) differs in "
                              f"{', '.join(differ) if differ else 'its search settings'}: choose another "
                              "search.study_name or search.storage")
    names = [metric_name(o) for o in objectives]
    if study.metric_names != names:
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(names)  # optuna-dashboard labels the objectives with these
    return study


_UNITS = (("_usd", "USD"), ("_gib", "GiB"), ("_kwh", "kWh"), ("_kg", "kg"), ("_bytes", "bytes"), ("_s", "s"))


def metric_name(objective: str) -> str:
    """An objective as optuna-dashboard shows it, with its unit: ``time_to_train_s`` -> ``time to train (s)``,
    ``cost_usd`` -> ``cost (USD)``, ``mfu`` -> ``MFU (fraction)``."""
    if objective == "mfu":
        return "MFU (fraction)"
    for suffix, unit in _UNITS:
        if objective.endswith(suffix):
            return f"{objective[:-len(suffix)].replace('_', ' ')} ({unit})"
    return objective.replace("_", " ")


class Objective:
    def __init__(self, ctx: Any, spec: StorageSpec, n_trials: int) -> None:
        self.ctx = ctx
        self.ev = ctx.evaluator
        self.spec = spec
        self.n_trials = n_trials
        self.ledger = lg.Ledger()
        self.known: set = set()  # trial numbers whose outcome is in the evaluator's memo
        self.current: Optional[int] = None  # the trial being evaluated (or last evaluated)

    def sync(self, study: optuna.Study) -> None:
        """Refresh the shared record and memoise every finished trial's outcome (any worker's)."""
        self.ledger.refresh(study)
        for num, t in self.ledger.trials.items():
            if num in self.known or t.state not in lg.FINISHED:
                continue
            self.known.add(num)
            res = t.user_attrs.get(RESULT) or {}
            if "plan" not in res or "duplicate_of" in res:
                continue
            plan = plan_from_fields(self.ev.space.base, res["plan"])
            values = tuple(t.values) if t.state == TrialState.COMPLETE else None
            self.ev.cache.setdefault(plan_key(plan), Outcome(plan, values, res.get("reason"), res.get("metrics", {})))

    def accept(self, params: Dict[str, Any]) -> bool:
        """For NSGA-II offspring: a valid, unclaimed plan whose memory lower bound fits."""
        try:
            plan = decode(self.ev.space, params)
        except Infeasible:
            return False
        except (ValueError, KeyError):  # a parameter missing from the child: cannot judge
            return True
        if self.ledger.claimed(lg.key_text(plan_fields(plan))) or plan_key(plan) in self.ev.cache:
            return False
        w = self.ev.workload
        return memory_lower_bound_bytes(w, plan) <= usable_bytes(w.cluster)  # the memory margin

    def _join_generation(self, study: optuna.Study, trial: optuna.Trial) -> None:
        """Enqueued seed trials skip the sampler, so NSGA-II would never count them as its first
        generation; assign them one as the sampler does (public ``get_trial_generation``)."""
        sampler = study.sampler
        if not isinstance(sampler, optuna.samplers.BaseGASampler):
            return
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.number == trial.number:
                sampler.get_trial_generation(study, t)
                return

    def _claim(self, study: optuna.Study, trial: optuna.Trial, key: str) -> int:
        with study_lock(self.spec):
            self.ledger.refresh(study)
            owner = self.ledger.owner(key)
            if owner is None:
                trial.set_user_attr(lg.CLAIM, key)
                owner = trial.number
        return owner

    def _owner_outcome(self, study: optuna.Study, trial: optuna.Trial, owner: int, plan: Any) -> Optional[Outcome]:
        """The result of the plan's owner (another worker's trial: wait for it); None: the owner failed and
        this trial has claimed the plan itself, or the owner's process on this host is gone."""
        end = time.monotonic() + WAIT_FOR_OWNER_S
        key = lg.key_text(plan_fields(plan))
        while True:
            self.sync(study)
            hit = self.ev.cache.get(plan_key(plan))
            if hit is not None:
                self.ev.hits += 1
                return hit
            if self.ledger.owner(key) in (None, trial.number) and self._claim(study, trial, key) == trial.number:
                return None
            held = self.ledger.trials.get(owner)
            if held is not None and lg.dead_here(held):  # its worker was killed: evaluate here; the dead trial,
                return None  # once taken over, finds this trial's outcome stored and simulates nothing
            if time.monotonic() > end:
                raise optuna.TrialPruned(f"duplicate of trial {owner}, still running after {WAIT_FOR_OWNER_S:.0f} s")
            time.sleep(0.02)

    def __call__(self, trial: optuna.Trial) -> Sequence[float]:
        study = trial.study
        self.current = trial.number
        if str(trial.user_attrs.get(lg.SLOT, "")).startswith("seed:"):
            self._join_generation(study, trial)
        self.sync(study)
        try:
            plan = suggest_plan(trial, self.ev.space)
        except Infeasible as err:
            trial.set_user_attr(RESULT, {"reason": str(err)})
            raise optuna.TrialPruned(str(err)) from None
        fields = plan_fields(plan)
        result: Dict[str, Any] = {"plan": fields}
        owner = self._claim(study, trial, lg.key_text(fields))
        out = None
        if owner != trial.number:
            out = self._owner_outcome(study, trial, owner, plan)
            if out is not None:
                result["duplicate_of"] = owner
        if out is None:
            out = self.ev.evaluate(plan)
        result["metrics"] = out.metrics
        if not out.feasible:
            result["reason"] = out.reason
            trial.set_user_attr(RESULT, result)
            raise optuna.TrialPruned(out.reason)
        for name, value in self.ctx.constraints.violations(out.metrics).items():
            trial.set_constraint(name, value)
        trial.set_user_attr(RESULT, result)
        assert out.values is not None
        return out.values


def trials_of(study: optuna.Study) -> List[FrozenTrial]:
    """Finished and failed trials (not the over-budget ones, which never ran)."""
    return [t for t in study.get_trials(deepcopy=False, states=(*lg.FINISHED, TrialState.FAIL))
            if not t.user_attrs.get(OVER_BUDGET)]
