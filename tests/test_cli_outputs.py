"""What a run leaves: strict-JSON report, Chrome trace, PNG, the report in vtrain.log; clean-up after
bad input removes only what the run created; presets; Ctrl-C in one line."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.clirun import run_inprocess
from tests.sampling import fast_every

BASE = ["task=simulate", "+model=gpt175b", "+cluster=a100x1024"]
PLAN = ["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8", "parallelism.micro_batch_size=1"]
BAD = ["parallelism.tp=5", "parallelism.pp=1", "parallelism.dp=1"]


def _strict(text: str):
    def reject(token: str):
        raise ValueError(f"non-JSON token {token}")

    return json.loads(text, parse_constant=reject)


def test_simulate_writes_strict_report_trace_png_and_log(tmp_path, capfd):
    run = tmp_path / "run"
    res = run_inprocess([*BASE, *PLAN, f"hydra.run.dir={run}"], capfd)
    assert res.code == 0, res.err
    assert "iteration time" in res.out and "(tp,pp,dp)=(8,16,8)" in res.out
    report = _strict((run / "report.json").read_text())
    assert report["gpus_used"] == 1024 and report["fits"] in (True, False)
    trace = _strict((run / "timeline.json").read_text())
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"compute", "dp_comm"} <= threads and any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert (run / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "vtrain" in (run / ".hydra" / "hydra.yaml").read_text()
    log = (run / "vtrain.log").read_text()
    assert "iteration time" in log and "memory per GPU" in log and "][INFO] - " in log  # the report, stamped
    assert not list(run.glob(".*.tmp"))


def test_strict_json_maps_non_finite_to_null():
    from vtrain.io.jsonio import dumps, finite
    from vtrain.workload.enums import Schedule

    assert json.loads(dumps({"a": math.nan, "b": [math.inf, 1.5], "c": (1, -math.inf)})) == \
        {"a": None, "b": [None, 1.5], "c": [1, None]}
    assert finite({"s": Schedule.INTERLEAVED, "p": Path("/x")}) == {"s": "interleaved", "p": "/x"}
    assert "NaN" not in dumps([math.nan]) and "Infinity" not in dumps([math.inf])


def test_bad_input_in_the_current_directory_removes_only_what_it_wrote(tmp_path, capfd, monkeypatch):
    """hydra.run.dir=. plus a bad input: the directory and everything it held stay; Hydra's files and
    the log this run created are removed; files of an earlier run are kept."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    run_inprocess([*BASE, *BAD, "hydra.run.dir=."], capfd).one_line_error()
    assert tmp_path.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]

    assert run_inprocess([*BASE, *PLAN, "hydra.run.dir=."], capfd).code == 0  # an earlier, good run
    before = {p.name for p in tmp_path.iterdir()}
    run_inprocess([*BASE, *BAD, "hydra.run.dir=."], capfd).one_line_error()
    assert {p.name for p in tmp_path.iterdir()} == before and (tmp_path / ".hydra" / "config.yaml").is_file()


def test_two_runs_in_one_second_get_their_own_directories(tmp_path):
    from vtrain.cli import rundir

    first = rundir.claim(str(tmp_path / "outputs" / "day" / "12-00-00"), exclusive=True)
    second = rundir.claim(str(tmp_path / "outputs" / "day" / "12-00-00"), exclusive=True)
    assert first.name == "12-00-00" and second.name == "12-00-00-2" and first.is_dir() and second.is_dir()


def test_clean_up_keeps_what_another_process_wrote(tmp_path):
    """A shared, existing run directory: another process rewrote .hydra/config.yaml after this run
    wrote it, and wrote its own result file; this run's clean-up deletes neither."""
    from vtrain.cli import rundir

    run = tmp_path / "shared"
    run.mkdir()
    rundir.claim(str(run), exclusive=False)
    (run / ".hydra").mkdir()
    for name in rundir.HYDRA_FILES:
        (run / name).write_text("this run")
    rundir.start(run, owned=False)
    time.sleep(0.01)
    (run / ".hydra" / "config.yaml").write_text("the other process, later")
    assert [p.name for p in rundir.discard()] == ["hydra.yaml", "overrides.yaml"]
    assert (run / ".hydra" / "config.yaml").read_text() == "the other process, later"

    rundir.claim(str(run), exclusive=False)
    rundir.start(run, owned=False)
    (run / "report.json").write_text("{}")  # a result file: the run's directory is kept as it is
    assert rundir.discard() == [] and (run / "report.json").is_file()


@pytest.mark.parametrize("preset,fits", fast_every(2, [("llama3_405b_h100", True), ("gpt3_megatron", True)]))
def test_experiment_presets(tmp_path, capfd, preset, fits):
    res = run_inprocess([f"+experiment={preset}", f"hydra.run.dir={tmp_path}/r"], capfd)
    assert res.code == 0, res.err
    report = _strict((tmp_path / "r" / "report.json").read_text())
    assert report["fits"] is fits and 0 < report["mfu"] < 1


def test_gpt3_megatron_preset_is_the_published_plan():
    from vtrain import compose

    cfg = compose(["+experiment=gpt3_megatron"])
    p = cfg.parallelism
    assert (cfg.model.name, cfg.cluster.name, cfg.task) == ("gpt175b", "a100x1024", "simulate")
    assert (p.tp, p.pp, p.dp, p.schedule, p.virtual_stages, p.recompute) == (8, 16, 8, "interleaved", 2, "full")


@pytest.mark.parametrize("raised", [FileNotFoundError(2, "No such file or directory", "optuna.journal.lock.rename"),
                                    UnboundLocalError("cannot access local variable 'trial'")])
def test_an_error_raised_while_ctrl_c_unwinds_is_the_interrupt(tmp_path, capfd, monkeypatch, raised):
    """Ctrl-C inside Optuna's journal lock makes the lock's rename fail: that is the interrupt, not a write error."""
    from vtrain.cli import logs, main

    def interrupted_task(cfg, out_dir):
        logs.mark_interrupted()  # what the CLI's SIGINT handler does first
        raise raised

    monkeypatch.setattr(main, "run_task", interrupted_task)
    res = run_inprocess(["+model=gpt175b", "+cluster=a100x1024", "tracking=off", f"hydra.run.dir={tmp_path}/r"], capfd)
    assert res.code == 130, res.err
    assert res.err.strip().splitlines() == ["vtrain: interrupted (Ctrl-C); finished trials and written files are kept"]


@pytest.mark.slow
def test_ctrl_c_during_a_search_is_one_line(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "vtrain", "+model=gpt175b", "+cluster=a100x1024", "tracking=off",
                          "search.progress_bar=false", "search.n_trials=100000", f"hydra.run.dir={tmp_path}/run"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "run" / "optuna.journal").exists():
        time.sleep(0.2)
    time.sleep(2.0)  # inside the trials
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert err.strip().splitlines() == ["vtrain: interrupted (Ctrl-C); finished trials and written files are kept"]
    assert (tmp_path / "run" / "optuna.journal").is_file()  # kept: the study resumes
    assert os.path.isdir(tmp_path / "run")
