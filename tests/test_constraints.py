"""Constrained search: deadlines, budgets, GPU counts, memory head-room and MFU as constraints, checked
against the exhaustive grid (brute force over its records, not through the constraint code)."""
from __future__ import annotations

import pytest

from vtrain.config.compose import compose
from vtrain.search.run import run_search

DAY = 86400.0
SMALL = ["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search.progress_bar=false",
         "tracking.enabled=false"]


def _grid(tmp_path, *extra):
    return run_search(compose(SMALL + ["search=grid", "search.workers=1", *extra]), tmp_path)


# a grid search per constraint (~2 s of CPU); the fast loop keeps
# test_nsgaii_sets_optuna_constraints_and_honours_a_deadline
@pytest.mark.slow
def test_grid_best_plans_under_each_constraint_match_brute_force(tmp_path):
    free = _grid(tmp_path)
    feas = free.feasible
    small = [r for r in feas if r.metrics["gpus_used"] <= 4]  # thresholds among the plans max_gpus=4 keeps
    days = sorted(r.metrics["time_to_train_s"] / DAY for r in small)
    costs = sorted(r.metrics["cost_usd"] for r in small)
    deadline, budget = days[len(days) // 2], costs[len(costs) // 2]
    mfu = sorted(r.metrics["mfu"] for r in small)[len(small) // 4]
    res = _grid(tmp_path, f"search.max_days={deadline}", f"search.max_cost_usd={budget * 1.2}", f"search.min_mfu={mfu}",
                "search.max_memory_fraction=0.8", "search.max_gpus=4")
    cap = 0.8 * free.context.workload.cluster.gpu.hbm_capacity_bytes / 2**30
    ok = [r for r in feas if r.metrics["time_to_train_s"] <= deadline * DAY and r.metrics["cost_usd"] <= budget * 1.2
          and r.metrics["mfu"] >= mfu and r.metrics["peak_memory_gib"] <= cap and r.metrics["gpus_used"] <= 4]
    assert ok, "the constraints leave some plan"
    assert len(res.satisfying) == len(ok)
    assert res.best["cost"].metrics["cost_usd"] == pytest.approx(min(r.metrics["cost_usd"] for r in ok))
    assert res.best["time"].metrics["time_to_train_s"] == pytest.approx(min(r.metrics["time_to_train_s"] for r in ok))
    assert all(r.satisfies for r in res.front)
    exact = _grid(tmp_path, "search.gpus=4")
    assert {r.metrics["gpus_used"] for r in exact.records if r.feasible} == {4.0}


def test_nsgaii_sets_optuna_constraints_and_honours_a_deadline(tmp_path):
    import optuna

    free = _grid(tmp_path)
    days = sorted(r.metrics["time_to_train_s"] / DAY for r in free.feasible)
    deadline = days[len(days) // 4]
    cfg = compose(SMALL + [f"search.storage={tmp_path / 'c.journal'}", "search.study_name=c", "search.n_trials=40",
                           "search.population_size=8", f"search.max_days={deadline}"])
    res = run_search(cfg, tmp_path)
    assert res.best and res.best["cost"].metrics["time_to_train_s"] <= deadline * DAY
    study = optuna.load_study(study_name="c", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "c.journal"))))
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert done and all("max_days" in t.constraints for t in done)
    for t in done:
        assert (t.constraints["max_days"] <= 0) == (t.values[0] <= deadline * DAY)


@pytest.mark.slow
def test_gpt3_cheapest_plan_within_30_days_matches_the_grid(tmp_path):
    """The README's command: ``python -m vtrain +model=gpt175b +cluster=a100x1024 search.max_days=30``."""
    from vtrain.cli.task_search import run

    base = ["+model=gpt175b", "+cluster=a100x1024", "search.progress_bar=false", "tracking.enabled=false"]
    grid = run_search(compose(base + ["search=grid"]), tmp_path / "grid")
    within = [r for r in grid.feasible if r.metrics["time_to_train_s"] <= 30 * DAY]
    expected = min(r.metrics["cost_usd"] for r in within)
    search = run_search(compose(base + ["search.max_days=30"]), tmp_path / "nsga")
    got = search.best["cost"]
    assert got.metrics["time_to_train_s"] <= 30 * DAY
    assert got.metrics["cost_usd"] == pytest.approx(expected, rel=1e-9)
    assert run(compose(base + ["search.max_days=30", f"search.storage={tmp_path / 'cli.journal'}"]),
               tmp_path / "cli") == 0
