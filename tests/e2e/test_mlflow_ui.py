"""End to end: a real ``mlflow server`` on a free port, a small search logged to it over HTTP, and
headless-Chromium screenshots of the experiment's runs page (readable parent and Pareto child run names),
of the child runs (compare view) and of ``pareto.html`` as the server serves it to the artifact preview.

Needs the Debian package ``chromium`` (`.ci/setup_chromium.sh`); skips with that reason otherwise.
The MLflow runs table nests child runs under their (collapsed) parent, so the child runs are checked
in the rendered DOM of the compare view, which lists each run by name with its params and metrics.
Set ``VTRAIN_E2E_SCREENSHOTS=<dir>`` to keep the screenshots.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,900", "--virtual-time-budget=15000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {url} not healthy after {timeout_s:.0f} s")


def _chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def mlflow_server(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its uvicorn worker: our own session
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: run .ci/setup_chromium.sh as root)")
def test_search_against_mlflow_server_and_screenshot_runs(tmp_path, mlflow_server, capsys):
    from mlflow.tracking import MlflowClient

    from vtrain.cli.task_search import run
    from vtrain.config.compose import compose

    cfg = compose(["+model=gpt_1_7b", "+cluster=h200x8", "training.global_batch_size=32", "search.n_trials=5",
                   "search.population_size=4", "search.progress_bar=false",
                   f"search.storage=sqlite:///{tmp_path / 'optuna.db'}", f"tracking.uri={mlflow_server}",
                   "tracking.experiment_name=vtrain-e2e"])
    assert run(cfg, tmp_path / "run") == 0
    out = capsys.readouterr().out
    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.get_experiment_by_name("vtrain-e2e")
    runs_url = f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs"
    assert runs_url in out

    children = client.search_runs([exp.experiment_id], filter_string="tags.pareto = 'true'")
    front = (tmp_path / "run" / "pareto.csv").read_text().strip().splitlines()[1:]
    assert len(children) == len(front) >= 1, "a child run per Pareto plan"
    names = sorted(r.info.run_name for r in children)
    # named by the plan label and trial (vtrain/io/labels.py), e.g. "(2, 2, 2) mb=1 interleaved x4 rc=none | trial 0"
    assert all(re.match(r"^\(\d+, \d+, \d+\) mb=\d+ .* \| trial \d+$", n) for n in names), names
    assert len(set(names)) == len(names), "child names tell plans apart"
    parent = client.get_run(children[0].data.tags["mlflow.parentRunId"])
    parent_name = parent.info.run_name
    assert parent_name.startswith("gpt_1_7b h200x8 nsgaii ")

    profile = tmp_path / "chromium-profile"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    # 1) the experiment's runs page: the parent run, readable name (children nested under it)
    dom = _chromium(runs_url, profile, "--dump-dom").stdout
    assert parent_name in dom, "the runs page did not render the parent run"
    _chromium(runs_url, profile, f"--screenshot={shots / 'runs.png'}")
    # 2) the Pareto child runs side by side, by name, with their plan params and human metrics
    ids = urllib.parse.quote(json.dumps([r.info.run_id for r in children]))
    compare = f"{mlflow_server}/#/compare-runs?runs={ids}&experiments=%5B%22{exp.experiment_id}%22%5D"
    dom = _chromium(compare, profile, "--dump-dom").stdout
    for n in names:
        assert n in dom, f"child run {n} missing from the rendered page"
    assert "days_to_train" in dom and "cost_musd" in dom
    _chromium(compare, profile, f"--screenshot={shots / 'child_runs.png'}")
    # 3) the parent's artifact view previewing pareto.html (an inline SVG: renders without scripts)
    art = f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}/artifacts/pareto.html"
    dom = _chromium(art, profile, "--dump-dom").stdout
    assert "pareto.html" in dom and ("svg" in dom or "iframe" in dom), "no HTML preview of pareto.html"
    _chromium(art, profile, f"--screenshot={shots / 'pareto_html.png'}")
    for png in ("runs.png", "child_runs.png", "pareto_html.png"):
        data = (shots / png).read_bytes()
        assert data[:4] == b"\x89PNG" and len(data) > 20_000, f"{png} looks empty"
    keep = os.environ.get("VTRAIN_E2E_SCREENSHOTS")
    if keep:  # e.g. VTRAIN_E2E_SCREENSHOTS=outputs/e2e to look at them
        shutil.copytree(shots, keep, dirs_exist_ok=True)
