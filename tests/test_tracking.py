"""A real 5-trial search logged to a temporary MLflow SQLite store, read back with MlflowClient;
resume continues the parent run; an unreachable server fails in one line after the results exist."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from vtrain.cli.task_search import run
from vtrain.config.compose import compose
from vtrain.search.plans import SEARCHED_FIELDS
from vtrain.tracking.mlflow_logger import TrackingError, read_table

SMALL = ["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search.progress_bar=false",
         "search.n_trials=5", "search.population_size=4", "search.study_name=tracked"]


def _client(uri: str):
    """MLflow's client, imported here rather than at collection (~1.8 s of CPU in each pytest worker)."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _cfg(tmp_path: Path, uri: str, *extra: str):
    return compose(SMALL + [f"search.storage={tmp_path / 'optuna.db'}", f"tracking.uri={uri}",
                            "tracking.experiment_name=vtrain-test", *extra])


def _runs(client, exp):
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return ([r for r in runs if "mlflow.parentRunId" not in r.data.tags],
            [r for r in runs if "mlflow.parentRunId" in r.data.tags])


@pytest.mark.slow
def test_search_logs_parent_and_child_runs(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert run(_cfg(tmp_path, uri, "tracking.child_runs=all"), tmp_path / "run1") == 0
    out = capsys.readouterr().out
    assert f"mlflow ui --backend-store-uri {uri}" in out
    assert "child runs logged in" in out and "/#/experiments/" in out and "/runs" in out

    client = _client(uri)
    exp = client.get_experiment_by_name("vtrain-test")
    parents, children = _runs(client, exp)
    assert len(parents) == 1 and len(children) == 5
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name.startswith("gpt_1_7b h200x8 nsgaii ")
    tags = parent.data.tags
    assert tags["mlflow.user"] and tags["mlflow.source.name"].startswith("python -m vtrain")
    assert tags["vtrain.version"] and "gpt_1_7b on h200x8" in tags["mlflow.note.content"]
    assert parent.data.params["model.name"] == "gpt_1_7b" and parent.data.params["search.n_trials"] == "5"
    assert parent.data.metrics["trials"] == 5
    assert parent.data.metrics["best_cost.cost_musd"] == pytest.approx(parent.data.metrics["best_cost.cost_usd"] / 1e6,
                                                                       rel=1e-3)
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"config.yaml", "trials.csv", "pareto.csv", "pareto.png", "pareto.html", "best_time.yaml",
            "best_cost.yaml", "best_time", "best_cost", "trials_table.json"} <= arts
    table = read_table(client, parent.info.run_id)
    assert sorted(r["trial"] for r in table) == [0, 1, 2, 3, 4] and "days_to_train" in table[0]
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "best_time")} == {
        "best_time/report.json", "best_time/timeline.json"}
    local = Path(client.download_artifacts(parent.info.run_id, "pareto.csv", str(tmp_path / "dl")))
    assert local.read_text().splitlines()[0].startswith("trial,tp,pp,dp")

    complete = [c for c in children if c.data.tags["vtrain.state"] == "COMPLETE"]
    assert complete, "a 5-trial search on one node finds a feasible plan"
    for c in children:
        assert c.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert set(SEARCHED_FIELDS) <= set(c.data.params) or c.data.tags["vtrain.state"] == "PRUNED"
    for c in complete:
        assert {"iteration_time_s", "time_to_train_s", "cost_usd", "mfu", "peak_memory_gib", "fits",
                "days_to_train", "cost_musd", "mfu_pct"} <= set(c.data.metrics)
        assert c.data.metrics["fits"] == 1.0
        assert c.info.run_name.endswith(f"| trial {c.data.tags['vtrain.trial']}") and "(" in c.info.run_name
    pareto = [c for c in children if c.data.tags["pareto"] == "true"]
    n_front = len((tmp_path / "run1" / "pareto.csv").read_text().strip().splitlines()) - 1
    assert len(pareto) == n_front >= 1

    # resume: the same study continues its parent run and adds only the new trials (one run each)
    assert run(_cfg(tmp_path, uri, "search.n_trials=8", "tracking.child_runs=all"), tmp_path / "run2") == 0
    parents, children = _runs(client, exp)
    assert len(parents) == 1 and len(children) == 8
    assert sorted(int(c.data.tags["vtrain.trial"]) for c in children) == list(range(8))
    table = read_table(client, parents[0].info.run_id)
    assert sorted(r["trial"] for r in table) == list(range(8)), "each trial once in the table"


@pytest.mark.slow  # a search logged to MLflow; the fast loop keeps test_simulate_is_tracked_as_one_run
def test_default_logs_one_child_run_per_trial_with_distinct_names_and_trimmed_params(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert run(_cfg(tmp_path, uri, "search.n_trials=12"), tmp_path / "run1") == 0
    client = _client(uri)
    parents, children = _runs(client, client.get_experiment_by_name("vtrain-test"))
    assert len(parents) == 1 and len(children) == 12  # every trial, not only the front
    assert sorted(int(c.data.tags["vtrain.trial"]) for c in children) == list(range(12))
    names = [c.info.run_name for c in children]
    assert len(set(names)) == 12
    for c in children:
        plan = {k: c.data.params[k] for k in ("tp", "pp", "dp")} if "tp" in c.data.params else None
        if plan:  # named by the plan in the search's notation: "(tp, pp, dp) mb=... | trial N"
            assert c.info.run_name.startswith(f"({plan['tp']}, {plan['pp']}, {plan['dp']}) mb=")
        assert c.info.run_name.endswith(f"| trial {c.data.tags['vtrain.trial']}") or not plan
        assert c.data.tags["vtrain.role"] in ("front", "feasible", "outside-constraints", "pruned", "fail")
        assert c.info.status == "FINISHED" and c.data.tags["vtrain.logged"] == "true"
        if c.data.tags["vtrain.state"] == "PRUNED":
            assert c.data.tags["vtrain.pruned_reason"]
    front = len((tmp_path / "run1" / "pareto.csv").read_text().strip().splitlines()) - 1
    assert sum(c.data.tags["pareto"] == "true" for c in children) == front >= 1
    assert {c.data.tags["vtrain.role"] for c in children if c.data.tags["pareto"] == "true"} == {"front"}
    params = parents[0].data.params
    assert len(params) < 40 and params["model.name"] == "gpt_1_7b" and params["search.n_trials"] == "12"
    assert params["training.global_batch_size"] == "32" and "parallelism.grad_bucket_mib" not in params
    assert parents[0].data.tags["vtrain.best_time"].startswith("(")


@pytest.mark.slow  # a search logged to MLflow; the fast loop keeps test_simulate_is_tracked_as_one_run
def test_front_child_runs_are_the_front_and_top_plans_and_an_orphan_is_healed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = _cfg(tmp_path, uri, "search.n_trials=12", "tracking.top_k=1", "tracking.child_runs=front")
    assert run(cfg, tmp_path / "run1") == 0
    client = _client(uri)
    exp = client.get_experiment_by_name("vtrain-test")
    parents, children = _runs(client, exp)
    front = len((tmp_path / "run1" / "pareto.csv").read_text().strip().splitlines()) - 1
    assert front <= len(children) <= front + 2 < 12
    assert {c.data.tags["vtrain.role"] for c in children} <= {"front", "feasible"}
    # a kill -9 between create_run and its log_batch leaves a bare RUNNING child: the next logging heals it
    victim = children[0]
    trial = victim.data.tags["vtrain.trial"]
    client.delete_run(victim.info.run_id)
    bare = client.create_run(exp.experiment_id, run_name="half-written", tags={
        "mlflow.parentRunId": parents[0].info.run_id, "vtrain.trial": trial,
        "vtrain.study": "tracked", "vtrain.storage": str(tmp_path / "optuna.db")})
    assert run(cfg, tmp_path / "run2") == 0
    _, again = _runs(client, exp)
    mine = [c for c in again if c.data.tags["vtrain.trial"] == trial]
    assert len(mine) == 1 and mine[0].info.run_id != bare.info.run_id and mine[0].data.tags["vtrain.logged"] == "true"
    assert len(again) == len(children)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# a search, then MLflow's client timing out (~1.5 s of CPU); the fast loop keeps test_simulate_is_tracked_as_one_run
@pytest.mark.slow
def test_unreachable_server_fails_in_one_line_after_results_exist(tmp_path):
    out = tmp_path / "run"
    uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(TrackingError) as err:
        run(_cfg(tmp_path, uri, "tracking.http_timeout_s=2"), out)
    msg = str(err.value)
    assert "\n" not in msg and uri in msg and str(out) in msg
    for name in ("trials.csv", "pareto.csv", "pareto.png", "pareto.html", "best_time.yaml", "best_cost.yaml"):
        assert (out / name).is_file(), name


def test_tracking_off_writes_results_only(tmp_path, capsys):
    cfg = compose(SMALL + [f"search.storage={tmp_path / 'optuna.journal'}", "tracking=off"])
    assert run(cfg, tmp_path / "run") == 0
    assert "MLflow" not in capsys.readouterr().out
    assert (tmp_path / "run" / "pareto.csv").is_file() and not (tmp_path / "run" / "config.yaml").exists()


@pytest.mark.slow
def test_a_multirun_sweep_lands_in_one_experiment(tmp_path):
    """Two jobs of a sweep (two batch sizes): one experiment named for the sweep, one parent run per job."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["-m", "+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32,64", "search.n_trials=4",
            "search.population_size=4", "search.progress_bar=false", f"tracking.uri={uri}",
            f"hydra.sweep.dir={tmp_path / 'sweeps' / 's1'}"]
    out = subprocess.run([sys.executable, "-m", "vtrain", *args], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    client = _client(uri)
    exps = [e for e in client.search_experiments() if e.name != "Default"]
    assert [e.name for e in exps] == ["vtrain-sweep-sweeps-s1"]
    parents, children = _runs(client, exps[0])
    assert len(parents) == 2 and len(children) == 8
    assert sorted(p.data.params["training.global_batch_size"] for p in parents) == ["32", "64"]
    assert sorted(p.info.run_name.split(" job ")[1][0] for p in parents) == ["0", "1"]


def test_simulate_is_tracked_as_one_run(tmp_path):
    from vtrain.cli.task_simulate import run as simulate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = compose(["task=simulate", "+model=gpt_1_7b", "+cluster=h200x8", "parallelism.tp=1", "parallelism.pp=1",
                   "parallelism.dp=8", "training.global_batch_size=64", f"tracking.uri={uri}"])
    assert simulate(cfg, tmp_path / "run") == 0
    client = _client(uri)
    exp = client.get_experiment_by_name("vtrain-gpt_1_7b-h200x8")  # beside the searches of this model and cluster
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.status == "FINISHED" and r.data.tags["vtrain.kind"] == "simulate"
    assert r.info.run_name.startswith("simulate (1, 1, 8) mb=1 1f1b rc=")  # the plan in the search's notation
    assert r.data.params["plan.dp"] == "8" and r.data.params["model.name"] == "gpt_1_7b"
    report = __import__("json").loads((tmp_path / "run" / "report.json").read_text())
    assert r.data.metrics["iteration_time_s"] == pytest.approx(report["iteration_time_s"])
    assert r.data.metrics["days_to_train"] == pytest.approx(report["time_to_train_s"] / 86400, rel=1e-3)
    assert {a.path for a in client.list_artifacts(r.info.run_id)} == {"report.json", "timeline.json", "timeline.png"}
