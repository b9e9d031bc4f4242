"""A whole search: config → plan space → (grid | Optuna study) → records → Pareto front and best plans.

No file output and no MLflow here (:mod:`vtrain.search.outputs`, :mod:`vtrain.tracking`).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.search.objective import Evaluator, directions
from vtrain.search.pareto import pareto_front, to_minimise
from vtrain.search.records import SearchResult, TrialRecord
from vtrain.search.space import (
    SEARCHED_FIELDS,
    PlanSpace,
    enumerate_plans,
    plan_fields,
    plan_space,
    trial_params,
)
from vtrain.sim.memory import memory_lower_bound_bytes
from vtrain.workload.workload import Workload

# settings that do not change a plan's simulation: left out of reproduce commands
_NOT_PLAN = frozenset({"search", "tracking", "hydra", "task"})


@dataclass
class Context:
    workload: Workload
    cost: CostModel
    space: PlanSpace
    evaluator: Evaluator
    objectives: List[str]
    directions: List[str]


def prepare(cfg: Any, profile: Any = None) -> Context:
    """Build the Workload and cost model once; every trial swaps only the plan.

    The searched fields of ``cfg.parallelism`` are replaced by a one-GPU plan first, so that a
    default plan that does not suit this cluster (e.g. tp*pp > GPUs) does not stop the search."""
    w = build_workload(_one_gpu_plan(cfg))
    cost = cost_model_for(w, profile)
    space = plan_space(w.model, w.cluster, w.plan, cfg.search)
    if not space.tp or not space.pp:
        raise ConfigError(f"search: no tensor-parallel size divides heads={w.model.num_heads} and kv heads="
                          f"{w.model.num_kv_heads} within search.max_tp")
    objectives = [str(o) for o in cfg.search.objectives]
    ev = Evaluator(w, cost, space, objectives)
    return Context(w, cost, space, ev, objectives, directions(objectives))


def _one_gpu_plan(cfg: Any) -> Any:
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False)) if OmegaConf.is_config(cfg) else cfg
    with open_dict(cfg):
        cfg.parallelism.update(tp=1, pp=1, dp=1, micro_batch_size=1, schedule="1f1b", virtual_stages=1,
                               sequence_parallel=False, distributed_optimizer=False)
    return cfg


def base_overrides(cfg: Any) -> List[str]:
    """Command-line overrides a ``task=simulate`` run needs to reproduce a searched plan: the model,
    the cluster and every other override given to the search (from Hydra when it ran) except the
    search/tracking/hydra settings and the searched ``parallelism.*`` fields."""
    try:
        from hydra.core.hydra_config import HydraConfig

        given = list(HydraConfig.get().overrides.task)
    except Exception:  # compose API: no Hydra run
        given = []
    searched = {f"parallelism.{f}" for f in SEARCHED_FIELDS}

    def keep(o: str) -> bool:
        key = o.lstrip("+~").split("=", 1)[0]
        return key.split(".")[0] not in _NOT_PLAN and key not in searched

    kept = [o for o in given if keep(o)]
    groups = {o.lstrip("+~").split("=", 1)[0] for o in kept}
    lead = [f"+{g}={cfg[g].name}" for g in ("model", "cluster") if g not in groups]
    return lead + kept


def _best(feasible: Sequence[TrialRecord]) -> Dict[str, TrialRecord]:
    uniq = {r.plan_key: r for r in reversed(feasible)}.values()  # first trial of each plan
    if not uniq:
        return {}
    m = lambda r, k: r.metrics.get(k, float("inf"))  # noqa: E731
    return {"time": min(uniq, key=lambda r: (m(r, "time_to_train_s"), m(r, "cost_usd"), r.number)),
            "cost": min(uniq, key=lambda r: (m(r, "cost_usd"), m(r, "time_to_train_s"), r.number))}


def finish(result: SearchResult) -> SearchResult:
    """Fill the Pareto front (de-duplicated by plan and by values) and the fastest/cheapest plans."""
    feas = sorted(result.feasible, key=lambda r: r.number)
    pts = [to_minimise(r.values or (), result.directions) for r in feas]
    result.front = pareto_front(feas, pts, [r.plan_key for r in feas])
    result.best = _best(feas)
    return result


def run_grid(ctx: Context, workers: int, progress_bar: bool) -> List[TrialRecord]:
    from vtrain.search.grid import evaluate_all

    plans = enumerate_plans(ctx.space)
    bar = _bar(progress_bar, len(plans), "grid")
    try:
        outs = evaluate_all(ctx.evaluator, plans, workers, bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    return [TrialRecord(i, "COMPLETE" if o.feasible else "PRUNED", plan_fields(o.plan), o.values, o.metrics,
                        o.reason) for i, o in enumerate(outs)]


def _bar(enabled: bool, total: int, desc: str) -> Any:
    import sys

    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="plan", desc=desc, file=sys.stderr)


def initial_population(ctx: Context, size: int, seed: int) -> List[dict]:
    """Trial parameters of ``size`` plans drawn uniformly from the valid plans whose memory lower
    bound fits the GPU (:func:`memory_lower_bound_bytes`; no simulation). NSGA-II's first generation
    otherwise spends most trials on plans that cannot fit (~86% of GPT-3 175B x 1,024 A100)."""
    cap = ctx.workload.cluster.gpu.hbm_capacity_bytes
    fitting = [p for p in enumerate_plans(ctx.space) if memory_lower_bound_bytes(ctx.workload, p) <= cap]
    picks = random.Random(seed).sample(fitting, min(size, len(fitting)))
    return [trial_params(ctx.space, p) for p in picks]


def run_optuna(ctx: Context, search: Any, out_dir: Path) -> tuple:
    import optuna
    from optuna.trial import TrialState

    from vtrain.search import study as st

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = st.storage_url(search, out_dir)
    storage = st.make_storage(url)
    name = str(search.study_name or f"vtrain-{ctx.workload.model.name}-{ctx.workload.cluster.name}-{search.sampler}")
    sampler = st.make_sampler(search, len(ctx.objectives))
    if bool(search.filter_offspring):
        from vtrain.search.operators import filter_offspring, promising

        filter_offspring(sampler, promising(ctx.evaluator), int(search.seed))
    study = st.open_study(name, storage, ctx.directions, sampler)
    resumed = len(st.finished_trials(study))
    objective = st.Objective(ctx.evaluator)
    if bool(search.seed_population) and str(search.sampler) in ("nsgaii", "tpe") and not study.trials:
        size = min(int(search.population_size), int(search.n_trials))
        for params in initial_population(ctx, size, int(search.seed)):
            study.enqueue_trial(params)
            objective.seeded += 1
    n_trials = int(search.n_trials)
    rounds = int(search.local_search_rounds) if str(search.sampler) in ("nsgaii", "tpe") else 0
    reserve = int(n_trials * float(search.local_search_fraction)) if rounds > 0 else 0
    run = st.run_study(study, objective, n_trials - reserve, bool(search.progress_bar))
    stale_failed = run.stale_failed  # only the first call can find trials a killed process left
    if reserve:
        from vtrain.search.refine import candidates, front_plans

        rounds = min(rounds, reserve)
        for r in range(rounds):  # memetic step: one-move neighbours of the front, as ordinary trials
            target = n_trials - reserve + (r + 1) * reserve // rounds
            missing = target - len(st.finished_trials(study))
            if missing <= 0:
                continue
            for plan in candidates(ctx.evaluator, front_plans(ctx.evaluator, ctx.directions), missing):
                study.enqueue_trial(trial_params(ctx.space, plan))
            run = st.run_study(study, objective, target, bool(search.progress_bar))
    records = [_record(t) for t in study.get_trials(deepcopy=False, states=(*st.FINISHED, TrialState.FAIL))]
    return records, name, url, resumed, stale_failed


def _record(t: Any) -> TrialRecord:
    res = t.user_attrs.get("result") or {}
    state = t.state.name
    reason = res.get("reason") or t.system_attrs.get("fail_reason")
    return TrialRecord(t.number, state, res.get("plan"), tuple(t.values) if state == "COMPLETE" else None,
                       res.get("metrics", {}), reason, res.get("duplicate_of"))


def run_search(cfg: Any, out_dir: Path, profile: Any = None) -> SearchResult:
    """Run the configured search; an empty ``front`` means no plan was feasible."""
    search = cfg.search
    sampler = str(search.sampler)
    ctx = prepare(cfg, profile)
    t0 = time.perf_counter()
    name = url = None
    resumed = stale = 0
    if sampler == "grid":
        records = run_grid(ctx, int(search.workers), bool(search.progress_bar))
    else:
        if int(search.n_trials) < 1:
            raise ConfigError(f"search.n_trials={search.n_trials} must be >= 1 with search.sampler={sampler}")
        records, name, url, resumed, stale = run_optuna(ctx, search, out_dir)
    result = SearchResult(
        model=ctx.workload.model.name, cluster=ctx.workload.cluster.name, sampler=sampler,
        objectives=ctx.objectives, directions=ctx.directions, records=records, front=[], best={},
        wall_s=time.perf_counter() - t0, simulations=ctx.evaluator.simulations, study_name=name, storage=url,
        resumed_trials=resumed, stale_failed=stale, base_overrides=base_overrides(cfg), context=ctx)
    return finish(result)
