import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def _compose_once_per_session() -> None:
    """Hydra spends ~0.2 s of CPU on one compose (about 24 YAML files loaded and merged), and the tests compose
    the same few configs hundreds of times. In the test session a compose with the same overrides (and no
    ``--config-dir``, whose files a test may rewrite) gives a deep copy of the first result (~15 ms): the same
    value, which a test may change freely. Failures are never kept (each call raises afresh), and
    tests/unit/test_compose_memo.py checks that a copy equals a fresh compose. VTRAIN_TEST_FRESH_COMPOSE=1 turns
    this off."""
    import copy

    import vtrain.config.compose as composing

    real = composing.compose
    memo: dict = {}

    def compose(overrides=None, require=True, config_dirs=()):
        if config_dirs:
            return real(overrides, require, config_dirs)
        key = (tuple(overrides or ()), bool(require))
        if key not in memo:
            memo[key] = real(overrides, require, config_dirs)
        else:
            composing.set_user_config_dirs(())  # what the real call does first: no user config dirs
        return copy.deepcopy(memo[key])

    compose.real = real  # type: ignore[attr-defined]
    composing.compose = compose


if os.environ.get("VTRAIN_TEST_FRESH_COMPOSE") != "1":
    _compose_once_per_session()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true an end-to-end test (marker e2e) that skips fails instead: CI cannot go green without them
    (a missing chromium or SLURM is a broken CI machine, not a reason to skip)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and item.get_closest_marker("e2e") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"an end-to-end test may not skip under CI=true: {reason}"


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
