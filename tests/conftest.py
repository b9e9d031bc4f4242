import gc
import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def _compose_once_per_session() -> None:
    """Hydra's composition once per distinct set of config-group choices; value overrides applied to a copy
    the way Hydra applies them (tests/composecache.py); Hydra's defaults list kept per set of group choices
    and its merge per defaults list, for the composes that go to Hydra (tests/hydramemo.py). VTRAIN_TEST_FRESH_COMPOSE=1
    turns this off."""
    import vtrain.config.compose as composing
    from tests import hydramemo
    from tests.composecache import make_compose

    composing.compose = make_compose(composing)
    hydramemo.install(str(composing.CONF_DIR.resolve()))  # the composes that go to Hydra (the command line's)


if os.environ.get("VTRAIN_TEST_FRESH_COMPOSE") != "1":
    _compose_once_per_session()


def pytest_collection_finish(session):
    """Python's cyclic garbage collector in a long test process: the modules, collected tests and session memos
    are ~300k objects that live to the end, and each discarded OmegaConf config is a cycle (every node points to
    its parent), so full collections came every few tests and each scanned the whole heap (~1M objects, ~0.3 s):
    ~14 s of each worker's ~70 s of CPU in the fast loop. Here the objects alive after collection are frozen
    (``gc.freeze``: kept out of every later collection), gen 0 is collected every 10,000 net allocations instead
    of 700, and each test module's end collects what the module left and freezes its survivors (below), so a
    full collection scans one module's objects, not the session's: ~8 s per worker. A cycle a module leaves is
    collected at the latest at the module's end; only one that reaches an earlier module's survivors stays to the
    end of the process (the workers' peak memory was unchanged, ~540-690 MB; docs/testing.md, "Measured")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


@pytest.hookimpl(trylast=True)  # after the runner's teardown: the module's fixtures are released first
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        gc.collect()
        gc.freeze()


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
