"""A model, cluster and GPU of one's own: YAML files under ``--config-dir`` (Hydra's flag), found by the
name checks, the GPU lookup, the search's reproduce command and a multirun, after the shipped configs."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import run_inprocess

PLAN = ["parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "tracking=off"]
# a model of one's own has no published run: its tokens are given (vtrain/cli/run_info.py asks otherwise)
OWN = ["+model=my_model", "+cluster=my_cluster", "+pricing.usd_per_gpu_hour.my_gpu=3.0",
       "training.tokens_to_train=1.5e13"]


def _own_configs(root: Path) -> Path:
    for group, text in {
        "model": "defaults:\n  - llama3_8b\n  - _self_\nname: my_model\nnum_layers: 16\n",
        "gpu": "defaults:\n  - h100_sxm\n  - _self_\nname: my_gpu\nhbm_capacity_gib: 64\n",
        "cluster": "defaults:\n  - h100x1024\n  - _self_\nname: my_cluster\ngpu: my_gpu\nnum_nodes: 2\n",
    }.items():
        (root / group).mkdir(parents=True)
        (root / group / f"my_{group}.yaml").write_text(text)
    return root


def test_a_simulation_on_configs_of_ones_own(tmp_path, capfd):
    own = _own_configs(tmp_path / "conf")
    res = run_inprocess([f"--config-dir={own}", "task=simulate", *OWN, *PLAN, f"hydra.run.dir={tmp_path / 'r'}"], capfd)
    assert res.code == 0, res.err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert (report["model"], report["cluster"], report["gpu"]) == ("my_model", "my_cluster", "my_gpu")
    assert report["memory_capacity_bytes"] == 64 * 2**30 and report["gpus_used"] == 8
    # the next run in this process has no --config-dir: the name is unknown again
    res = run_inprocess(["task=simulate", *OWN, *PLAN, f"hydra.run.dir={tmp_path / 'r2'}"], capfd)
    assert res.code == 2 and "model=my_model is unknown" in res.one_line_error()


def test_a_missing_config_dir_is_one_line(tmp_path, capfd):
    res = run_inprocess(["-cd", str(tmp_path / "none"), "task=simulate", "+model=gpt175b", "+cluster=a100x1024",
                         f"hydra.run.dir={tmp_path / 'r'}"], capfd)
    assert res.code == 2
    assert f"--config-dir={tmp_path / 'none'}: no such directory" in res.one_line_error()
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_the_search_reproduce_command_finds_the_configs_again(tmp_path):
    own = _own_configs(tmp_path / "conf")
    run = tmp_path / "search"
    out = subprocess.run([sys.executable, "-m", "vtrain", "-cd", str(own), *OWN, "search.n_trials=6", "tracking=off",
                          "search.progress_bar=false", f"hydra.run.dir={run}"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("reproduce: "))
    assert line.startswith(f"reproduce: python -m vtrain --config-dir={own} task=simulate +model=my_model")
    cmd = shlex.split(line.removeprefix("reproduce: python -m vtrain ").split(" $(cat")[0])
    plan = (run / "best_time.yaml").read_text().split()
    again = subprocess.run([sys.executable, "-m", "vtrain", *cmd, *plan, "tracking=off",
                            f"hydra.run.dir={tmp_path / 'again'}"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((tmp_path / "again" / "report.json").read_text())["gpu"] == "my_gpu"


@pytest.mark.slow  # a CLI run on a user folder; the fast loop keeps test_a_simulation_on_configs_of_ones_own
def test_hydra_flags_may_follow_the_overrides(tmp_path, capfd):
    """Hydra's parser reads its flags before the overrides only; the CLI puts them there (before, a flag
    among the overrides printed argparse's usage and 'unrecognized arguments')."""
    own = _own_configs(tmp_path / "conf")
    res = run_inprocess(["task=simulate", *OWN, "--config-dir", str(own), *PLAN, f"hydra.run.dir={tmp_path / 'r'}"],
                        capfd)
    assert res.code == 0, res.err
    assert json.loads((tmp_path / "r" / "report.json").read_text())["model"] == "my_model"


def test_the_python_api_takes_the_same_folders(tmp_path):
    from vtrain import compose, simulate
    from vtrain.errors import ConfigError

    own = _own_configs(tmp_path / "my conf")  # a space in the path: Hydra's search path is quoted
    report = simulate(compose([*OWN, *PLAN], config_dirs=[str(own)]))
    assert (report.model, report.cluster, report.gpu) == ("my_model", "my_cluster", "my_gpu")
    with pytest.raises(ConfigError):  # the next compose without them: unknown again
        compose([*OWN, *PLAN])


@pytest.mark.slow  # a CLI run on a user folder; the fast loop keeps test_a_simulation_on_configs_of_ones_own
def test_a_validation_table_names_configs_of_ones_own(tmp_path, capfd):
    own = _own_configs(tmp_path / "conf")
    table = tmp_path / "own.csv"
    table.write_text("model,gpu,num_gpus,tp,pp,micro_batch,global_batch,seq_len,tokens_per_s_per_gpu\n"
                     "my_model,my_gpu,8,1,1,1,64,2048,5000\n")
    res = run_inprocess([f"--config-dir={own}", "task=validate", "+cluster=my_cluster", f"validate.data={table}",
                         "tracking=off", f"hydra.run.dir={tmp_path / 'r'}"], capfd)
    assert res.code == 0, res.err
    assert "| n=1 | skipped=0" in res.out
