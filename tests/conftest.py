import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def gpt175b_cfg():
    from vtrain import compose

    return compose(["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
                    "parallelism.dp=8", "parallelism.micro_batch_size=1"])


@pytest.fixture(autouse=True)
def _simulate_tracked_only_into_a_given_store(monkeypatch):
    """``task=simulate`` logs to MLflow when tracking is on (the default): in this process, only a test that
    names its store (``tracking.uri=...``, e.g. tests/test_tracking.py) does, so the many simulate runs of
    the other tests neither write ``outputs/mlflow.db`` in the checkout nor wait for MLflow."""
    from vtrain.tracking import simulate_run

    real = simulate_run.start
    monkeypatch.setattr(simulate_run, "start", lambda cfg: real(cfg) if cfg.tracking.get("uri") else None)
