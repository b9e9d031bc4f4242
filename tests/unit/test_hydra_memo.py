"""The test session's memo of Hydra's defaults list and merge (tests/hydramemo.py) gives the config Hydra's own
steps give for a command line, in RUN mode and in the MULTIRUN mode of ``Hydra.get_mode``, the first time and
from the memo, and Hydra's error for a bad one, every time."""
from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hydra._internal import config_loader_impl as cli
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from tests.sampling import fast_every
from vtrain.config.compose import CONF_DIR
from vtrain.config.store import register_configs

pytestmark = pytest.mark.skipif(not hasattr(cli.create_defaults_list, "real"),
                                reason="VTRAIN_TEST_FRESH_COMPOSE=1: no memo to check")

LINES = [
    ["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
     "parallelism.dp=8", "tracking=off", "hydra.run.dir=memo_run_x"],  # relative, composed only: never created
    ["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=4", "++training.seq_len=4096"],
    ["+experiment=gpt3_megatron", "hydra/launcher=slurm", "~tracking"],
    ["task=validate", "+cluster=h100x1024", "validate.show_rows=0", "hydra.job.chdir=true"],
]
BAD = [["+model=nope", "+cluster=a100x1024"], ["+model=gpt175b", "parallelism.nope=1"],
       ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=abc"], ["stack=nope"]]


def _load(overrides, mode: RunMode):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="vtrain"):
        loader = GlobalHydra.instance().config_loader()
        return loader.load_configuration("config", list(overrides), mode, validate_sweep_overrides=mode == RunMode.RUN)


def _text(cfg) -> str:
    return OmegaConf.to_yaml(cfg) + f"struct={OmegaConf.is_struct(cfg)}"


def _fresh(monkeypatch, overrides, mode):
    with monkeypatch.context() as m:
        m.setattr(cli, "create_defaults_list", cli.create_defaults_list.real)
        m.setattr(cli.ConfigLoaderImpl, "_compose_config_from_defaults_list",
                  cli.ConfigLoaderImpl._compose_config_from_defaults_list.real)
        return _load(overrides, mode)


CASES = [(o, m) for o in LINES for m in (RunMode.RUN, RunMode.MULTIRUN)]


@pytest.mark.parametrize("overrides, mode", fast_every(4, CASES), ids=[f"{' '.join(o[:3])} {m.name}" for o, m in CASES])
def test_a_command_lines_config_is_hydras(monkeypatch, overrides, mode):
    want = _text(_fresh(monkeypatch, overrides, mode))
    first = _load(overrides, mode)
    first.parallelism.tp = 3  # a change to one copy does not reach the next
    assert _text(_load(overrides, mode)) == want
    assert _text(_load(overrides, RunMode.MULTIRUN if mode == RunMode.RUN else RunMode.RUN)) == _text(
        _fresh(monkeypatch, overrides, RunMode.MULTIRUN if mode == RunMode.RUN else RunMode.RUN))


@pytest.mark.slow  # the fast loop keeps a MULTIRUN-mode compose in test_a_command_lines_config_is_hydras
def test_a_sweep_in_multirun_mode_is_hydras(monkeypatch):
    sweep = ["+model=gpt175b,llama3_70b", "+cluster=a100x1024", "parallelism.tp=4,8"]
    assert _text(_load(sweep, RunMode.MULTIRUN)) == _text(_fresh(monkeypatch, sweep, RunMode.MULTIRUN))


@pytest.mark.parametrize("overrides", fast_every(4, BAD), ids=[" ".join(o) for o in BAD])
def test_a_bad_command_line_fails_as_hydra_fails_every_time(monkeypatch, overrides):
    with pytest.raises(Exception) as fresh:
        _fresh(monkeypatch, overrides, RunMode.RUN)
    for _ in range(2):
        with pytest.raises(Exception) as memo:
            _load(overrides, RunMode.RUN)
        assert (type(memo.value), str(memo.value)) == (type(fresh.value), str(fresh.value))


def test_a_user_config_folder_goes_to_hydra_each_time(tmp_path):
    (tmp_path / "model").mkdir()
    line = ["+model=mine", "+cluster=a100x1024", f"hydra.searchpath=[file://{tmp_path}]"]
    for layers in (2, 3):  # the file is rewritten between two composes of one command line
        (tmp_path / "model" / "mine.yaml").write_text(
            "defaults:\n  - gpt175b\n  - _self_\nname: mine\nnum_layers: %d\n" % layers)
        assert _load(line, RunMode.RUN).model.num_layers == layers


def test_command_lines_of_the_same_choices_keep_their_own_values(monkeypatch):
    """Two command lines choosing the same groups: each gets its own value overrides (and hydra.* settings)."""
    lines = [LINES[0], [o.replace("tp=8", "tp=2").replace("memo_run_x", "memo_run_y") for o in LINES[0]]]
    want = [_text(_fresh(monkeypatch, line, RunMode.RUN)) for line in lines]
    for line, text in zip(lines + lines, want + want):
        assert _text(_load(line, RunMode.RUN)) == text
    assert _load(lines[1], RunMode.RUN).parallelism.tp == 2
