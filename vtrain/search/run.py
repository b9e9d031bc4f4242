"""A whole search: config → plan space → (grid | Optuna study) → records → Pareto front and best plans.

No file output and no MLflow here (:mod:`vtrain.search.outputs`, :mod:`vtrain.tracking`).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.search import constraints as cons
from vtrain.search.objective import Evaluator, directions
from vtrain.search.pareto import pareto_front, to_minimise
from vtrain.search.plans import FIELD_GROUP, SEARCHED_FIELDS, TIED_FIELDS
from vtrain.search.records import SearchResult, TrialRecord
from vtrain.search.settings import check_all
from vtrain.search.space import PlanSpace, plan_space
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

# settings that do not change a plan's simulation: left out of reproduce commands
_NOT_PLAN = frozenset({"search", "tracking", "hydra", "task"})
# told of each finished trial of an Optuna search as it ends: (study name, storage, record); e.g. MLflow's logger
TrialSink = Callable[[str, str, TrialRecord], None]


@dataclass
class Context:
    workload: Workload
    cost: CostModel
    space: PlanSpace
    evaluator: Evaluator
    objectives: List[str]
    directions: List[str]
    constraints: cons.Constraints


def prepare(cfg: Any, profile: Any = None) -> Context:
    """Build the Workload and cost model once; every trial swaps only the plan.

    The searched fields of ``cfg.parallelism`` are replaced by a one-GPU plan first, so that a
    default plan that does not suit this cluster (e.g. tp*pp > GPUs) does not stop the search."""
    check_all(cfg)
    w = build_workload(_one_gpu_plan(cfg))
    w = dataclasses.replace(w, plan=dataclasses.replace(w.plan, **_where_they_apply(cfg)))
    cost = cost_model_for(w, profile)
    space = plan_space(w.model, w.cluster, w.plan, cfg.search)
    if not space.tp or not space.pp:
        raise ConfigError(f"search: no tensor-parallel size divides heads={w.model.num_heads} and kv heads="
                          f"{w.model.num_kv_heads} within search.max_tp")
    if space.min_gpus > w.cluster.num_gpus:
        raise ConfigError(f"search.{'gpus' if int(cfg.search.gpus) else 'min_gpus'}={space.min_gpus}: exceeds the "
                          f"{w.cluster.num_gpus} GPUs of cluster {w.cluster.name}")
    objectives = [str(o) for o in cfg.search.objectives]
    ev = Evaluator(w, cost, space, objectives, str(cfg.search.get("objective_quantile", "mid")))
    limits = cons.from_search(cfg.search, w.cluster.gpu.hbm_capacity_bytes)
    return Context(w, cost, space, ev, objectives, directions(objectives), limits)


def _one_gpu_plan(cfg: Any) -> Any:
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False)) if OmegaConf.is_config(cfg) else cfg
    with open_dict(cfg):
        cfg.parallelism.update(tp=1, pp=1, dp=1, micro_batch_size=1, schedule="1f1b", virtual_stages=1,
                               sequence_parallel=False, distributed_optimizer=False, zero_stage=0, cp=1, ep=1, etp=0,
                               **_applied_defaults())
    return cfg


def _applied_defaults() -> Dict[str, Any]:
    """The plan's defaults of :data:`vtrain.search.space.TIED_FIELDS` (off: what the one-GPU plan holds)."""
    return {f.name: f.default for f in dataclasses.fields(ParallelPlan) if f.name in TIED_FIELDS}


def _where_they_apply(cfg: Any) -> Dict[str, Any]:
    """The config's values of the TIED_FIELDS (already checked by ``check_all``), for the search's base plan,
    as the plan's types."""
    par = cfg.parallelism
    return {k: type(default)(par.get(k, default)) for k, default in _applied_defaults().items()}


def base_overrides(cfg: Any) -> List[str]:
    """Command-line overrides a ``task=simulate`` run needs to reproduce a searched plan: the model,
    the cluster and every other override given to the search (from Hydra when it ran) except the
    search/tracking/hydra settings and the searched ``parallelism.*`` fields."""
    try:
        from hydra.core.hydra_config import HydraConfig

        given = list(HydraConfig.get().overrides.task)
    except Exception:  # compose API: no Hydra run
        given = []
    searched = {f"{FIELD_GROUP[f]}.{f}" for f in SEARCHED_FIELDS}

    def keep(o: str) -> bool:
        key = o.lstrip("+~").split("=", 1)[0]
        return key.split(".")[0] not in _NOT_PLAN and key not in searched

    kept = [o for o in given if keep(o)]
    groups = {o.lstrip("+~").split("=", 1)[0] for o in kept}
    # an experiment preset selects its own model and cluster (naming them again is a Hydra error)
    lead = [] if "experiment" in groups else [f"+{g}={cfg[g].name}" for g in ("model", "cluster") if g not in groups]
    from vtrain.config.compose import user_config_dirs

    dirs = [f"--config-dir={d}" for d in user_config_dirs()]  # the user's own configs, found again
    return dirs + lead + kept


def _metric(r: TrialRecord, k: str) -> float:
    return r.metrics.get(k, float("inf"))


def _best(recs: Sequence[TrialRecord]) -> Dict[str, TrialRecord]:
    uniq = list({r.plan_key: r for r in sorted(recs, key=lambda r: -r.number)}.values())  # first trial of each plan
    if not uniq:
        return {}
    return {"time": min(uniq, key=lambda r: (_metric(r, "time_to_train_s"), _metric(r, "cost_usd"), r.number)),
            "cost": min(uniq, key=lambda r: (_metric(r, "cost_usd"), _metric(r, "time_to_train_s"), r.number))}


def _with_violations(rec: TrialRecord, limits: cons.Constraints) -> TrialRecord:
    v = limits.violations(rec.metrics)
    return rec if v == rec.violations else dataclasses.replace(rec, violations=v)  # no limits: no copy


def finish(result: SearchResult) -> SearchResult:
    """Constraint violations of every record, then the Pareto front (de-duplicated by plan and by values)
    and the fastest/cheapest plans among the plans within the constraints."""
    limits = result.constraints or cons.Constraints()
    result.records = [_with_violations(r, limits) if r.feasible else r for r in result.records]
    pool = sorted(result.satisfying, key=lambda r: r.number)
    pts = [to_minimise(r.values or (), result.directions) for r in pool]
    result.front = pareto_front(pool, pts, [r.plan_key for r in pool])
    result.best = _best(pool)
    result.unconstrained_best = _best(result.feasible) if limits.active else dict(result.best)
    return result


def run_grid(ctx: Context, workers: int, progress_bar: bool, max_plans: int = 0) -> List[TrialRecord]:
    from vtrain.search.grid import evaluate_grid, grid_tasks

    groups, tasks = grid_tasks(ctx.space, max_plans)
    bar = _bar(progress_bar, sum(t.plans for t in tasks), "grid")
    try:
        rows = evaluate_grid(ctx.evaluator, groups, tasks, workers, bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    return [TrialRecord(i, "PRUNED" if values is None else "COMPLETE", dict(zip(SEARCHED_FIELDS, fields)), values,
                        metrics, reason) for i, (fields, values, reason, metrics) in enumerate(rows)]


def _bar(enabled: bool, total: int, desc: str) -> Any:
    import sys

    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="plan", desc=desc, file=sys.stderr)


def study_name(ctx: Context, search: Any) -> str:
    return str(search.study_name or f"vtrain-{ctx.workload.model.name}-{ctx.workload.cluster.name}-{search.sampler}")


def _what_it_searches(ctx: Context, search: Any) -> Tuple[str, str, Dict[str, str]]:
    """(fingerprint, description, fingerprint per part) of what a study's trials depend on: the workload
    (model, base plan, cluster, stack, prices), the plan space, the objectives and the quantile they are ranked
    on; not the budget (search.n_trials), the constraints (applied to the trials afterwards) or how the run is
    shown. The parts name what differs when a study exists for another search."""
    import hashlib

    def digest(x: object) -> str:
        return hashlib.sha256(repr(x).encode()).hexdigest()

    w = ctx.workload
    parts = {"the workload (model, cluster, stack, base plan, prices)": digest(w),
             "the plan space (search.tp, search.pp, ... and search.max_gpus)": digest(ctx.space),
             "search.objectives": digest(tuple(ctx.objectives)),
             "search.objective_quantile": digest(str(search.get("objective_quantile", "")))}
    text = repr((w, ctx.space, tuple(ctx.objectives), str(search.get("objective_quantile", ""))))
    what = f"{w.model.name} on {w.cluster.name} ({w.cluster.num_gpus} x {w.cluster.gpu.name}, stack {w.stack.name})"
    return hashlib.sha256(text.encode()).hexdigest(), what, parts


def run_optuna(ctx: Context, search: Any, out_dir: Path,
               on_trial: Optional[TrialSink] = None) -> Tuple[List[TrialRecord], str, str, int, int]:
    from vtrain.search import study as st
    from vtrain.search.ledger import finished_count
    from vtrain.search.loop import Loop
    from vtrain.search.storage import storage_spec

    spec = storage_spec(search, out_dir)
    name = study_name(ctx, search)
    study = st.open_study(name, spec, ctx.directions, ctx.objectives, _what_it_searches(ctx, search))
    resumed = finished_count(study)
    hook = None if on_trial is None else (lambda t: on_trial(name, spec.display, _record(t)))
    loop = Loop(ctx, search, spec, study, hook)
    loop.run(bool(search.progress_bar))
    return [_record(t) for t in st.trials_of(study)], name, spec.display, resumed, loop.taken_over


def _record(t: Any) -> TrialRecord:
    res = t.user_attrs.get("result") or {}
    state = t.state.name
    reason = res.get("reason") or (None if state != "FAIL" else "interrupted: its worker stopped (FAIL)")
    return TrialRecord(t.number, state, res.get("plan"), tuple(t.values) if state == "COMPLETE" else None,
                       res.get("metrics", {}), reason, res.get("duplicate_of"))


def run_search(cfg: Any, out_dir: Path, profile: Any = None, on_trial: Optional[TrialSink] = None) -> SearchResult:
    """Run the configured search; an empty ``front`` means no plan was feasible. ``on_trial`` hears of each
    Optuna trial as it finishes (a grid search's records come all at once, in the result)."""
    search = cfg.search
    sampler = str(search.sampler)
    ctx = prepare(cfg, profile)
    t0 = time.perf_counter()
    name = url = None
    resumed = stale = 0
    if sampler == "grid":
        records = run_grid(ctx, int(search.workers), bool(search.progress_bar), int(search.get("max_grid_plans", 0)))
    else:
        records, name, url, resumed, stale = run_optuna(ctx, search, out_dir, on_trial)
    result = SearchResult(
        model=ctx.workload.model.name, cluster=ctx.workload.cluster.name, sampler=sampler,
        objectives=ctx.objectives, directions=ctx.directions, records=records, front=[], best={},
        wall_s=time.perf_counter() - t0, simulations=ctx.evaluator.simulations, study_name=name, storage=url,
        resumed_trials=resumed, stale_failed=stale, constraints=ctx.constraints, base_overrides=base_overrides(cfg),
        context=ctx)
    return finish(result)
