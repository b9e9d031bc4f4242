"""The plan search: space, grid enumeration and de-duplication, Optuna storage, resume, infeasible spaces,
Pareto front and hypervolume, best-plan overrides. Small model (GPT 1.7B) on one 8-GPU node."""
from __future__ import annotations

import dataclasses
import itertools
import random
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest
import yaml

from tests.sampling import fast_every
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.config.compose import compose
from vtrain.config.validate import check_plan
from vtrain.errors import ConfigError, VtrainError
from vtrain.search import outputs
from vtrain.search.pareto import dominates, hypervolume_2d, pareto_front
from vtrain.search.plans import canonical, plan_fields, plan_from_fields, plan_key
from vtrain.search.run import prepare, run_search
from vtrain.search.space import enumerate_plans
from vtrain.sim.simulator import simulate_workload
from vtrain.sim.stage_memory import memory_lower_bound_bytes
from vtrain.workload.enums import Recompute, Schedule

SMALL = ["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search.progress_bar=false",
         "tracking.enabled=false"]


def small(tmp_path: Path, *extra: str):
    return compose(SMALL + [f"search.storage=sqlite:///{tmp_path / 'optuna.db'}", *extra])


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_grid_enumerates_every_valid_plan_once(tmp_path):
    cfg = small(tmp_path, "search=grid")
    ctx = prepare(cfg)
    plans = enumerate_plans(ctx.space)
    keys = [plan_key(p) for p in plans]
    assert len(keys) == len(set(keys)), "the grid yields a plan twice"
    # brute force over the raw product, de-duplicated by the canonical form
    s, base = ctx.space, ctx.space.base
    expected = set()
    for tp, pp, dp, mb, (sched, v), rc, sp, do in itertools.product(
            s.tp, s.pp, s.dp, s.micro_batch_sizes,
            [(Schedule.ONE_F_ONE_B, 1)] + [(Schedule.INTERLEAVED, v) for v in s.virtual_stages],
            s.recompute, s.sequence_parallel, s.distributed_optimizer):
        p = canonical(dataclasses.replace(base, tp=tp, pp=pp, dp=dp, micro_batch_size=mb, schedule=sched,
                                          virtual_stages=v, recompute=rc, sequence_parallel=sp,
                                          distributed_optimizer=do))
        try:
            check_plan(ctx.workload.model, p, ctx.workload.cluster)
        except ConfigError:
            continue
        expected.add(plan_key(p))
    assert set(keys) == expected
    # canonical: no sequence parallelism at tp=1, no distributed optimizer at dp=1
    assert not any(p.tp == 1 and p.sequence_parallel for p in plans)
    assert not any(p.dp == 1 and p.distributed_optimizer for p in plans)
    # fewer GPUs than the cluster are part of the space
    assert {p.num_gpus for p in plans} >= {1, 2, 4, 8}

    result = run_search(cfg, tmp_path)
    assert len(result.records) == len(plans)
    assert result.front and all(r.feasible for r in result.front)
    assert len({r.plan_key for r in result.front}) == len(result.front)


@pytest.mark.slow
def test_memory_lower_bound_never_exceeds_the_simulated_peak():
    cfg = compose(["+model=gpt175b", "+cluster=a100x1024"])
    ctx = prepare(cfg)
    plans = random.Random(0).sample(enumerate_plans(ctx.space), 60)
    w = ctx.workload
    for p in plans:
        report, _ = simulate_workload(dataclasses.replace(w, plan=p), ctx.cost)
        assert memory_lower_bound_bytes(w, p) <= report.peak_memory_bytes * (1 + 1e-9)


def test_five_trial_search_is_stored_in_optuna(tmp_path):
    cfg = small(tmp_path, "search.n_trials=5", "search.study_name=five")
    result = run_search(cfg, tmp_path)
    study = optuna.load_study(study_name="five", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    finished = [t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                       optuna.trial.TrialState.PRUNED)]
    assert len(finished) == 5 == len(result.records)
    for t in finished:
        res = t.user_attrs["result"]
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert res["plan"]["tp"] * res["plan"]["pp"] * res["plan"]["dp"] == res["metrics"]["gpus_used"]
            assert t.values[0] == pytest.approx(res["metrics"]["time_to_train_s"])
            assert t.values[1] == pytest.approx(res["metrics"]["cost_usd"])
        else:
            assert res["reason"]
    with sqlite3.connect(tmp_path / "optuna.db") as con:  # WAL is a property of the file
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _orphan_from_a_dead_process(storage: str, study_name: str) -> int:
    """A trial left RUNNING by a process that then died (as a kill -9 leaves it), with the worker record
    every vtrain trial writes first."""
    code = ("import os, sys, optuna; from vtrain.search.ledger import WORKER, me\n"
            f"s = optuna.load_study(study_name={study_name!r}, storage={storage!r}); t = s.ask()\n"
            "t.set_user_attr(WORKER, me()); print(t.number); sys.stdout.flush(); os._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


LIVE = ("import sys, optuna; from vtrain.search.ledger import WORKER, me\n"
        "s = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2]); t = s.ask()\n"
        "t.set_user_attr(WORKER, me()); print(t.number, flush=True); sys.stdin.readline()\n"
        "s.tell(t, state=optuna.trial.TrialState.PRUNED)\n")


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_resume_takes_over_a_dead_workers_trial_and_keeps_completed_ones(tmp_path):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = run_search(small(tmp_path, "search.n_trials=4", "search.study_name=resume"), tmp_path)
    kept = {r.number: (r.state, r.values) for r in first.records}
    orphan = _orphan_from_a_dead_process(storage, "resume")
    study = optuna.load_study(study_name="resume", storage=storage)
    assert study.trials[orphan].state == optuna.trial.TrialState.RUNNING
    # a live worker's trial (another process, which tells it once its stdin closes): it holds a place in the
    # budget and must not be taken over; the resume waits for it once the rest of the budget is spent
    live = subprocess.Popen([sys.executable, "-c", LIVE, "resume", storage], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert live.stdout is not None and live.stdin is not None
    number = int(live.stdout.readline())
    threading.Timer(3.0, live.stdin.close).start()  # the live worker finishes its trial meanwhile
    second = run_search(small(tmp_path, "search.n_trials=7", "search.study_name=resume"), tmp_path)
    assert live.wait(60) == 0, "the live worker could tell its own trial"
    assert second.resumed_trials == 4 and second.stale_failed == 1
    study = optuna.load_study(study_name="resume", storage=storage)
    # the dead worker's trial is finished by the resume (its plan drawn and evaluated), not failed
    assert study.trials[orphan].state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert "vtrain.taken_over" in study.trials[orphan].user_attrs
    assert "vtrain.taken_over" not in study.trials[number].user_attrs, "a live worker's trial was taken over"
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 0
    assert sum(s in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for s in states) == 7
    now = {r.number: (r.state, r.values) for r in second.records}
    assert all(now[n] == v for n, v in kept.items()), "a completed trial changed or disappeared"


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_worker_whose_trial_another_worker_failed_goes_on(tmp_path, monkeypatch, when, kind):
    """Another worker may fail a live trial (an orphan past its grace on a starved machine, CI stop 28):
    the objective's writes or Optuna's tell then raise; the worker goes on and the budget still fills."""
    from vtrain.search import study as st
    from vtrain.search.storage import StorageSpec, make_storage

    spec = (StorageSpec("journal", str(tmp_path / "study.journal")) if kind == "journal"
            else StorageSpec("rdb", f"sqlite:///{tmp_path / 'optuna.db'}"))
    storage = spec.target
    call = st.Objective.__call__

    def fail(trial):
        if trial.number == 2:  # another worker's handle on the study
            other = optuna.load_study(study_name="starved", storage=make_storage(spec))
            other.tell(trial.number, state=optuna.trial.TrialState.FAIL)

    def failed_under_us(self, trial):
        if when == "before":
            fail(trial)
        values = call(self, trial)
        if when == "after":
            fail(trial)
        return values

    monkeypatch.setattr(st.Objective, "__call__", failed_under_us)
    res = run_search(small(tmp_path, "search.n_trials=5", "search.study_name=starved", f"search.storage={storage}"),
                     tmp_path)
    assert (tmp_path / "study.journal").exists() == (kind == "journal")
    study = optuna.load_study(study_name="starved", storage=make_storage(spec))
    assert study.trials[2].state == optuna.trial.TrialState.FAIL
    assert len([r for r in res.records if r.state in ("COMPLETE", "PRUNED")]) == 5


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_a_study_of_another_search_is_not_resumed(tmp_path):
    """The same storage and study name for another model (or cluster, prices, plan space): one line, and the
    study's trials stay as they were; the same search with a larger budget resumes."""
    run_search(small(tmp_path, "search.n_trials=3", "search.study_name=one"), tmp_path)
    other = small(tmp_path, "search.n_trials=3", "search.study_name=one")
    other.training.global_batch_size = 64
    with pytest.raises(ConfigError, match="search.study_name=one: the study in search.storage=.* searches gpt_1_7b"):
        run_search(other, tmp_path)
    again = run_search(small(tmp_path, "search.n_trials=5", "search.study_name=one"), tmp_path)
    assert again.resumed_trials == 3


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_trial_params_hold_the_plan_values_and_metric_names(tmp_path):
    run_search(small(tmp_path, "search.n_trials=6", "search.study_name=names"), tmp_path)
    study = optuna.load_study(study_name="names", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert study.metric_names == ["time to train (s)", "cost (USD)"]  # as optuna-dashboard shows them
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        plan = t.user_attrs["result"]["plan"]
        assert "dp_share" not in t.params and t.params["dp"] == plan["dp"] and t.params["tp"] == plan["tp"]


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_repeated_plans_are_deduplicated(tmp_path):
    # a space of a few plans (8 GPUs, tp=1, one micro-batch/schedule/recompute): 40 random draws repeat plans
    cfg = small(tmp_path, "search.sampler=random", "search.n_trials=40", "search.study_name=dup",
                "search.max_tp=1", "search.gpus=8", "search.micro_batch_sizes=[1]", "search.schedules=[1f1b]",
                "search.recompute=[none]", "search.sequence_parallel=[false]",
                "search.distributed_optimizer=[false,true]")
    result = run_search(cfg, tmp_path)
    feasible = [r for r in result.records if r.state == "COMPLETE"]
    dups = [r for r in result.records if r.duplicate_of is not None]
    assert dups, "40 draws from a few plans must repeat one"
    by_number = {r.number: r for r in result.records}
    for d in dups:
        assert d.plan == by_number[d.duplicate_of].plan
        assert d.values == by_number[d.duplicate_of].values
        assert by_number[d.duplicate_of].duplicate_of is None
    distinct = {r.plan_key for r in result.records if r.plan}
    assert result.simulations <= len(distinct)  # memoised: never simulated twice
    assert all(r.metrics["gpus_used"] == 8 for r in feasible)
    assert len({r.plan_key for r in result.front}) == len(result.front)


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_all_infeasible_space_ends_with_one_clear_line(tmp_path):
    from vtrain.cli.task_search import run

    # GPT-3's weights fit the 8 GPUs' memory together (350 GB of 1,120 GiB), its training state in no plan
    cfg = compose(["+model=gpt175b", "+cluster=h200x8", "search.n_trials=6", "search.progress_bar=false",
                   "tracking.enabled=false", f"search.storage=sqlite:///{tmp_path / 'optuna.db'}"])
    with pytest.raises(VtrainError) as err:
        run(cfg, tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "no feasible plan for gpt175b on h200x8" in msg
    assert (tmp_path / "trials.csv").is_file(), "the trials are on disk before the error"
    with pytest.raises(VtrainError, match="no feasible plan"):
        run(compose(["+model=gpt175b", "+cluster=h200x8", "search=grid", "search.progress_bar=false",
                     "tracking.enabled=false"]), tmp_path / "grid")


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_outputs_and_best_plan_overrides_reproduce_the_plan(tmp_path):
    cfg = small(tmp_path, "search.n_trials=12", "search.study_name=out", "search.population_size=6")
    result = run_search(cfg, tmp_path)
    paths = outputs.write_all(result, tmp_path, top_k=2)
    for name in ("trials.csv", "pareto.csv", "pareto.png", "pareto.html", "best_time.yaml", "best_cost.yaml"):
        assert (tmp_path / name).is_file() and (tmp_path / name).stat().st_size > 0, name
    assert tmp_path / "best_time" in paths and (tmp_path / "best_time" / "timeline.json").is_file()
    html = (tmp_path / "pareto.html").read_text()
    assert "<svg" in html and "<script" not in html and len(html) < 200_000, "a small, script-free page"
    assert html.count("<circle") == len(result.feasible)
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    # best_time.yaml: YAML (one folded string) and shell arguments at once
    text = (tmp_path / "best_time.yaml").read_text()
    overrides = yaml.safe_load(text).split()
    assert overrides == text.split()
    best = result.best["time"]
    w = build_workload(compose(SMALL + overrides))  # what task=simulate builds from these overrides
    report, _ = simulate_workload(w, cost_model_for(w))
    assert report.expected_time_to_train_s == pytest.approx(best.metrics["time_to_train_s"])  # ranked with goodput
    assert plan_from_fields(w.plan, best.plan) == w.plan


def test_pareto_front_and_hypervolume():
    pts = [(1.0, 5.0), (2.0, 3.0), (2.0, 3.0), (3.0, 4.0), (4.0, 1.0), (5.0, 1.0)]
    front = pareto_front(list(range(len(pts))), pts)
    assert [pts[i] for i in front] == [(1.0, 5.0), (2.0, 3.0), (4.0, 1.0)]
    assert all(not dominates(pts[j], pts[i]) for i in front for j in range(len(pts)))
    # rectangles to (6, 6): [1,6]x[5,6] + [2,6]x[3,5] + [4,6]x[1,3] = 5 + 8 + 4
    assert hypervolume_2d([pts[i] for i in front], (6.0, 6.0)) == pytest.approx(17.0)
    assert hypervolume_2d([(7.0, 0.0)], (6.0, 6.0)) == 0.0
    assert pareto_front(["a", "b", "c"], [(1, 2, 3), (1, 2, 3), (0, 3, 3)]) == ["c", "a"]  # by 1st objective


@pytest.mark.parametrize("objectives", ["[time_to_train_s,bogus]", "[cost_usd,cost_usd]"])
def test_unknown_or_repeated_objective_is_a_config_error(tmp_path, objectives):
    with pytest.raises(ConfigError, match="search.objectives"):
        run_search(small(tmp_path, f"search.objectives={objectives}"), tmp_path)
    assert not (tmp_path / "optuna.db").exists()


@pytest.mark.parametrize("uri", ["ftp://host/x", "{tmp}/mlruns", "file://{tmp}/mlruns", "   "])
def test_a_tracking_store_mlflow_cannot_open_is_refused_before_the_search(tmp_path, monkeypatch, uri):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    cfg = compose(SMALL[:-1] + [f"search.storage={tmp_path / 'o.journal'}", f"tracking.uri={uri.format(tmp=tmp_path)}"])
    with pytest.raises(ConfigError, match="tracking.uri=.*MLFLOW_ALLOW_FILE_STORE"):
        run_search(cfg, tmp_path / "run")
    assert not (tmp_path / "o.journal").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("override, field", fast_every(4, [
    ("search.schedules=[]", "search.schedules=[]"), ("search.micro_batch_sizes=[0]", "search.micro_batch_sizes=[0]"),
    ("search.population_size=1", "search.population_size=1"), ("search.seed=-1", "search.seed=-1"),
    ("search.mutation_prob=-1", "search.mutation_prob=-1"), ("search.sampler=cmaes", "search.sampler=cmaes"),
    ("search.max_days=0", "search.max_days=0"), ("search.max_memory_fraction=1.5", "search.max_memory_fraction=1.5"),
    ("search.min_mfu=2", "search.min_mfu=2"), ("search.n_trials=0", "search.n_trials=0"),
    ("search.local_search_fraction=2", "search.local_search_fraction=2"), ("search.virtual_stages=[0]", "search."),
    ("search.min_gpus=16", "search.min_gpus=16"), ("tracking.child_runs=some", "tracking.child_runs=some"),
    ("tracking.top_k=-1", "tracking.top_k=-1"), ("search.gpus=12", "search.gpus=12"),
]))
def test_bad_search_and_tracking_values_are_one_line_config_errors(tmp_path, override, field):
    with pytest.raises(ConfigError) as err:
        run_search(small(tmp_path, override, "search.max_gpus=8"), tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(field) and (": must" in msg or "exceeds" in msg), msg


def test_search_space_respects_node_and_cross_node_tp(tmp_path):
    ctx = prepare(compose(["+model=gpt175b", "+cluster=a100x1024"]))
    assert max(ctx.space.tp) == 8
    assert set(ctx.space.tp) == {1, 2, 4, 8}  # 3 and 6 divide the heads but would straddle 8-GPU nodes
    wide = prepare(compose(["+model=gpt175b", "+cluster=a100x1024", "search.allow_cross_node_tp=true"]))
    assert max(wide.space.tp) == 96 and set(wide.space.tp) - {1, 2, 4, 8} == {16, 24, 32, 48, 96}
    assert Recompute.FULL in ctx.space.recompute


def test_refinement_neighbours_are_new_valid_fitting_and_reach_other_shapes():
    from vtrain.search.refine import candidates, neighbours
    from vtrain.search.space import check

    ctx = prepare(compose(["+model=gpt175b", "+cluster=a100x1024"]))
    space, ev = ctx.space, ctx.evaluator
    start = canonical(dataclasses.replace(space.base, tp=8, pp=8, dp=16, micro_batch_size=2,
                                          schedule=Schedule.INTERLEAVED, virtual_stages=4, recompute=Recompute.NONE,
                                          sequence_parallel=True, distributed_optimizer=True))
    assert check(space, start) is None
    ev.evaluate(start)
    moves = list(neighbours(space, start))
    assert any(m.tp == 4 and m.pp == 8 and m.dp == 32 for m in moves)  # tp line search keeps the GPU count
    cands = candidates(ev, [start], 40)
    keys = [plan_key(c) for c in cands]
    cap = ctx.workload.cluster.gpu.hbm_capacity_bytes
    assert cands and len(set(keys)) == len(keys) and plan_key(start) not in keys
    for c in cands:
        assert check(space, c) is None
        assert memory_lower_bound_bytes(ctx.workload, c) <= cap
    # the (4,8,32) move overflows at micro-batch 2 and is repaired, not dropped
    assert any((c.tp, c.pp, c.dp) == (4, 8, 32) for c in cands)


def test_a_plan_the_simulator_refuses_is_pruned_with_its_reason_not_raised():
    """DualPipe over 16 stages with 7,680 micro-batches (DeepSeek-V3's batch, dp=1, mb=2) is above the engine's
    pipeline-task limit: a search prunes that plan with the engine's one-line reason (it used to end
    sweeps/deepseek_v3_h800.py with a traceback)."""
    from vtrain.search.objective import Evaluator

    ctx = prepare(compose(["+experiment=deepseek_v3_h800", "search.progress_bar=false", "tracking.enabled=false"]))
    ev = Evaluator(ctx.workload, ctx.cost, ctx.space, ["time_to_train_s", "cost_usd"])
    plan = plan_from_fields(ctx.space.base, {
        "tp": 8, "pp": 16, "dp": 1, "micro_batch_size": 2, "schedule": "dualpipe", "recompute": "full",
        "sequence_parallel": True, "distributed_optimizer": True, "zero_stage": 3, "cp": 2, "precision": "bf16",
        "ep": 1, "etp": 1, "moe_dispatcher": "deepep"})  # trial 5 of the shipped search
    assert plan.num_microbatches == 7680
    out = ev.evaluate_valid(plan)
    assert not out.feasible and out.values is None
    assert out.reason is not None and "above the simulation limit" in out.reason


def test_settings_that_suit_only_some_plans_apply_where_they_suit():
    """tp_comm_overlap, overlap_param_gather, fsdp_shard_size and first/last_stage_layers are kept from the
    config and applied to the plans they suit: a search with them starts (it used to fail on its one-GPU
    base plan), and a plan they do not suit runs (and reproduces) without them."""
    from vtrain.search.outputs import applied_overrides
    from vtrain.search.records import SearchResult, TrialRecord

    cfg = compose(["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search.progress_bar=false",
                   "tracking.enabled=false", "parallelism.tp_comm_overlap=true", "parallelism.fsdp_shard_size=2",
                   "parallelism.zero_stage=3", "parallelism.distributed_optimizer=false",
                   "parallelism.overlap_param_gather=false"])
    ctx = prepare(cfg)
    assert ctx.space.base.tp_comm_overlap and ctx.space.base.fsdp_shard_size == 2
    wide = canonical(dataclasses.replace(ctx.space.base, tp=2, dp=4, sequence_parallel=True, zero_stage=3))
    assert wide.tp_comm_overlap and wide.fsdp_shard_size == 2
    narrow = canonical(dataclasses.replace(ctx.space.base, tp=1, dp=1, sequence_parallel=False, zero_stage=3))
    assert not narrow.tp_comm_overlap and narrow.fsdp_shard_size == 0 and narrow.zero_stage == 0
    rec = TrialRecord(number=0, state="COMPLETE", values=(1.0, 1.0), plan={
        "tp": 1, "pp": 1, "dp": 1, "micro_batch_size": 4, "sequence_parallel": False, "zero_stage": 0})
    result = SearchResult(model="gpt_1_7b", cluster="h200x8", sampler="grid", objectives=["time_to_train_s"],
                          directions=["minimize"], records=[rec], front=[rec], best={"time": rec}, wall_s=0.0,
                          simulations=1, context=ctx)
    assert applied_overrides(result, rec) == ["parallelism.tp_comm_overlap=false"]
    # fsdp_shard_size is searched (search.fsdp_shard_sizes, default: the config's): the record holds its value
    assert plan_fields(narrow)["fsdp_shard_size"] == 0 and plan_fields(wide)["fsdp_shard_size"] == 2


def test_a_study_of_another_plan_space_names_what_differs(tmp_path):
    run_search(small(tmp_path, "search.n_trials=3", "search.study_name=two"), tmp_path)
    with pytest.raises(ConfigError, match=r"differs in the plan space \(search.tp"):
        run_search(small(tmp_path, "search.n_trials=3", "search.study_name=two", "search.pp=[1,2]"), tmp_path)


@pytest.mark.parametrize("storage, says", [("{tmp}", "is a directory; name a journal file"),
                                            ("ftp://host/x", "ftp:// is no database SQLAlchemy knows")])
def test_a_storage_optuna_cannot_open_is_one_line(tmp_path, storage, says):
    cfg = compose(SMALL + [f"search.storage={storage.format(tmp=tmp_path)}"])
    with pytest.raises(ConfigError, match=says):
        run_search(cfg, tmp_path / "run")


def test_a_file_that_is_no_journal_is_left_as_it_is(tmp_path):
    """search.storage naming a file of one's own (fuzzed: it was truncated, appended to, then a traceback)."""
    mine = tmp_path / "notes.txt"
    mine.write_bytes(b"important line1\nimportant line2 no newline")
    cfg = compose(SMALL + [f"search.storage={mine}", "search.n_trials=3"])
    with pytest.raises(ConfigError, match="exists and is not an Optuna journal"):
        run_search(cfg, tmp_path)
    assert mine.read_bytes() == b"important line1\nimportant line2 no newline"
    assert not (tmp_path / "notes.txt.torn").exists()


@pytest.mark.slow  # an Optuna study; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_the_pessimistic_quantile_ranks_everything_on_its_values(tmp_path):
    """search.objective_quantile=hi: the fastest and cheapest plans, the constraints and the tables use the
    slow end of the intervals the front was built on (fuzzed: they were picked on the point predictions)."""
    res = run_search(small(tmp_path, "search=grid", "search.objective_quantile=hi"), tmp_path)
    for r in res.feasible:
        assert r.values[0] == pytest.approx(r.metrics["time_to_train_s"])
        assert r.metrics["time_to_train_s"] >= r.metrics["predicted_time_to_train_s"]
    fastest = min(res.satisfying, key=lambda r: r.values[0])
    assert res.best["time"].values[0] == pytest.approx(fastest.values[0])
    front_keys = {r.plan_key for r in res.front}
    assert res.best["time"].plan_key in front_keys and res.best["cost"].plan_key in front_keys


@pytest.mark.slow  # a grid search; the fast loop keeps test_five_trial_search_is_stored_in_optuna
def test_a_small_grid_counts_each_simulation_once(tmp_path):
    res = run_search(small(tmp_path, "search=grid", "search.workers=1"), tmp_path)
    simulated = sum(1 for r in res.records if "iteration_time_s" in r.metrics)
    assert res.simulations == simulated
