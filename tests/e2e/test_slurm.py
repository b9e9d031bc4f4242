"""A real two-job Hydra multirun through SLURM (sbatch, via hydra-submitit-launcher).

Needs a running SLURM whose node is idle: `.ci/setup_slurm.sh` (run by `.ci/run` as root) installs
Debian's slurm-wlm + munge and starts a one-node cluster. Skips, with the reason, only when SLURM
cannot be started here. Both jobs log a case study to one fresh MLflow SQLite DB, which the
PrepareSharedStores callback creates before the jobs start (parallel jobs creating it would race).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# one local SLURM: its two tests run on one xdist worker (`--dist loadgroup`), not queued against each other
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _node_state() -> str:
    p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    if p.returncode == 0 and p.stdout.strip():
        return p.stdout.strip().splitlines()[0]
    return f"unreachable ({p.stderr.strip()})"


def _ensure_slurm() -> None:
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        pytest.skip("SLURM is not installed (no sinfo/sbatch); run .ci/setup_slurm.sh as root")
    state = _node_state()
    setup = ROOT / ".ci" / "setup_slurm.sh"
    if state not in ("idle", "mixed") and os.geteuid() == 0 and setup.is_file():
        subprocess.run(["bash", str(setup)], capture_output=True, text=True, timeout=180)  # idempotent
        state = _node_state()
    if state not in ("idle", "mixed"):
        pytest.skip(f"SLURM node is not idle (state: {state}); run .ci/setup_slurm.sh as root")


def test_two_job_multirun_through_sbatch(tmp_path):
    _ensure_slurm()
    sweep = tmp_path / "sweep"
    db = tmp_path / "mlflow.db"
    shapes = ("[{name:s1,num_layers:24,hidden_size:2048,num_heads:16},"
              "{name:s2,num_layers:32,hidden_size:4096,num_heads:32}]")
    cmd = [sys.executable, "-m", "vtrain", "-m", "+casestudy=compute_optimal",
           "case_study.params.deadline_days=10,20",  # the two jobs
           f"case_study.params.shapes={shapes}", "case_study.params.gpu_counts=[1024]",
           f"tracking.uri=sqlite:///{db}", "hydra/launcher=slurm", "hydra.launcher.timeout_min=5",
           f"hydra.sweep.dir={sweep}"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]

    # both jobs went through sbatch: submitit's sbatch script and one SLURM job folder per task
    subs = list((sweep / ".submitit").glob("*/*_submission.sh"))
    assert subs and "#SBATCH --partition=debug" in subs[0].read_text()
    logs = sorted((sweep / ".submitit").glob("*_*/*_log.out"))
    assert len(logs) == 2 and all("JobEnvironment(job_id=" in f.read_text() for f in logs)

    for job in ("0", "1"):  # each job wrote its table, plot and summary
        out = sweep / job
        assert (out / "shapes.csv").is_file() and (out / "compute_optimal.png").stat().st_size > 10_000
        assert json.loads((out / "summary.json").read_text())["vtrain_choice"]["shape"] in ("s1", "s2")
    deadlines = sorted(json.loads((sweep / j / "summary.json").read_text())["deadline_days"] for j in ("0", "1"))
    assert deadlines == [10, 20]

    from mlflow.tracking import MlflowClient  # both jobs logged to the one shared DB

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("vtrain/casestudy/compute_optimal")
    parents = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 2 and all(r.info.status == "FINISHED" for r in parents)
    assert sorted(float(r.data.params["deadline_days"]) for r in parents) == [10.0, 20.0]


def test_two_slurm_jobs_share_one_search_study(tmp_path):
    """Two sbatch jobs of one multirun run one Optuna study (one journal, one study name): the trial
    budget is the study's (n trials in all, not 2n), no plan was evaluated twice, none is left RUNNING."""
    _ensure_slurm()
    from collections import Counter

    import optuna

    journal = tmp_path / "study.journal"
    n = 40
    cmd = [sys.executable, "-m", "vtrain", "-m", "+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32",
           "search.progress_bar=false", "search.sampler=random", f"search.n_trials={n}", f"search.storage={journal}",
           "search.study_name=shared", "tracking=off", "+extra.job=a,b",  # the two jobs
           "hydra/launcher=slurm", "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    study = optuna.load_study(study_name="shared", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))))
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    finished = [t for t in study.trials if t.state in done]
    assert len(finished) == n, "n_trials is the study's budget, over both jobs"
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    # each job finished its search and wrote the study's front (the second may find the budget spent)
    assert all((tmp_path / "sweep" / job / "pareto.csv").is_file() for job in ("0", "1"))
    simulated = [t.user_attrs["vtrain.plan"] for t in finished
                 if "vtrain.plan" in t.user_attrs and "duplicate_of" not in t.user_attrs.get("result", {})]
    assert max(Counter(simulated).values()) == 1, "a plan was evaluated twice"
