"""Impossible inputs, each refused in one line (``vtrain: error: <field>=<value>: <rule>``) with exit code 2,
no traceback and nothing written: out-of-range numbers with the reason of their range (vtrain/workload/bounds.py),
measured files with a bad cell or no row to simulate, code or foreign paths named in overrides or config files
(vtrain/config/trust.py), and config files that YAML or the schema cannot read (vtrain/config/userfiles.py).
Every case runs the command line in this process (tests/clirun.py)."""
from pathlib import Path

import pytest

from tests.clirun import run_inprocess, validate_table
from tests.sampling import fast_every
from vtrain.config.trust import ALLOWED_TARGETS, check_tree

SIM = ["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
       "parallelism.dp=8", "tracking=off"]

# (overrides, the exact error line after "vtrain: error: ")
OUT_OF_RANGE = [
    (["model.num_layers=1000000000000"], "model.num_layers=1000000000000: must be an integer in [1, 10000] (the "
     "deepest published model has 126 layers (Llama 3 405B))"),
    (["model.vocab_size=9223372036854775808"], "model.vocab_size=9223372036854775808: must be an integer in "
     "[1, 16777216] (the largest published vocabulary is 262,144 tokens (Gemma 3))"),
    (["model.hidden_size=2000000"], "model.hidden_size=2000000: must be an integer in [1, 1048576] (the widest "
     "published model has hidden size 20,480 (MT-NLG 530B))"),
    (["model.hidden_size=-64"], "model.hidden_size=-64: must be an integer in [1, 1048576] (the widest published "
     "model has hidden size 20,480 (MT-NLG 530B))"),
    (["model.num_heads=100000"], "model.num_heads=100000: must be an integer in [1, 16384] (the most published "
     "attention heads are 128 (Llama 3 405B, MT-NLG, DeepSeek-V3))"),
    (["model.num_kv_heads=0"], "model.num_kv_heads=0: must be an integer in [1, 16384] (the most published "
     "attention heads are 128 (Llama 3 405B, MT-NLG, DeepSeek-V3))"),
    (["model.ffn_hidden_size=10000000"], "model.ffn_hidden_size=10000000: must be an integer in [1, 4194304] (the "
     "widest published MLP is 73,728 (PaLM 540B))"),
    (["model.max_seq_len=2000000000"], "model.max_seq_len=2000000000: must be an integer in [1, 1073741824] (the "
     "longest published context is 10M tokens (Llama 4 Scout))"),
    (["model.dropout=1"], "model.dropout=1.0: must be a finite number in [0, 1) (a probability: 0 switches "
     "dropout off)"),
    (["model.num_experts=100000"], "model.num_experts=100000: must be an integer in [0, 65536] (0: dense; the "
     "most published experts per layer are 2,048 (Switch-C))"),
    (["model.moe_top_k=5000"], "model.moe_top_k=5000: must be an integer in [1, 1024] (published routers send a "
     "token to at most 8 experts (DeepSeek-V3, Kimi K2))"),
    (["model.mtp_layers=1000"], "model.mtp_layers=1000: must be an integer in [0, 100] (DeepSeek-V3 trains 1 "
     "multi-token prediction module)"),
    (["model.kv_channels=100000"], "model.kv_channels=100000: must be an integer in [0, 65536] (0: hidden_size / "
     "heads; the largest published head dimension is 256 (Gemma))"),
    (["model.vocab_divisible_by=100000"], "model.vocab_divisible_by=100000: must be an integer in [0, 65536] (a "
     "padding multiple (Megatron-LM's default 128); 0: no padding)"),
    (["model.moe_imbalance=1e9"], "model.moe_imbalance=1000000000.0: must be a finite number in [1, 65536] (a "
     "share of the mean load, at most num_experts / moe_top_k)"),
    (["model.num_layers=1.5"], "model.num_layers=1.5: must be an integer"),
    (["cluster.num_nodes=5000000"], "cluster.num_nodes=5000000: must be an integer in [1, 4194304] (the largest "
     "published training run used 2,048 nodes (Llama 3, 16,384 H100))"),
    (["cluster.num_nodes=0"], "cluster.num_nodes=0: must be an integer in [1, 4194304] (the largest published "
     "training run used 2,048 nodes (Llama 3, 16,384 H100))"),
    (["cluster.gpus_per_node=2048"], "cluster.gpus_per_node=2048: must be an integer in [1, 1024] (the most GPUs "
     "of one published host are 16 (DGX-2))"),
    (["cluster.num_nodes=1000000"], "cluster.num_nodes=1000000: x gpus_per_node=8 = 8,000,000 GPUs, more than "
     "4,194,304 (~256x the 16,384 H100 of Llama 3 405B's run, the largest published)"),
    (["cluster.nvlink_domain=100000"], "cluster.nvlink_domain=100000: must be an integer in [0, 65536] (0: one "
     "node; the largest NVLink domain announced is 576 GPUs (NVL576))"),
    (["parallelism.tp=5000000"], "parallelism.tp=5000000: must be an integer in [1, 4194304] (a degree of "
     "parallelism is at most the GPUs of a plausible cluster)"),
    (["parallelism.virtual_stages=20000"], "parallelism.virtual_stages=20000: must be an integer in [1, 10000] "
     "(model chunks per stage hold at least one layer each (126 published, Llama 3 405B))"),
    (["parallelism.zero_stage=4"], "parallelism.zero_stage=4: must be an integer in [0, 3] (ZeRO defines stages "
     "0-3 (Rajbhandari et al. 2020))"),
    (["parallelism.grad_bucket_mib=1e9"], "parallelism.grad_bucket_mib=1000000000.0: must be a finite number in "
     "[0.1, 1048576] (a gradient bucket of 0.1 MiB to 1 TiB (Megatron's is ~150 MiB))"),
    (["parallelism.micro_batch_size=true"], "parallelism.micro_batch_size=true: must be an integer"),
    (["training.global_batch_size=100000000"], "training.global_batch_size=100000000: must be an integer in "
     "[1, 16777216] (the largest published batch is 15,360 sequences (DeepSeek-V3))"),
    (["training.global_batch_size=10000000"], "training.global_batch_size=10000000: x seq_len=2048 = "
     "20,480,000,000 tokens per batch, more than 17,179,869,184 (~1,000x the 16M-token batch of Llama 3 405B)"),
    (["training.seq_len=2000000000"], "training.seq_len=2000000000: must be an integer in [1, 1073741824] (the "
     "longest published context is 10M tokens (Llama 4 Scout))"),
    (["training.tokens_to_train=1e20"], "training.tokens_to_train=1e+20: must be a finite number in (0, 1e+16] "
     "(the most tokens published for one run are 36T (Qwen3))"),
    (["training.tokens_to_train=nan"], "training.tokens_to_train=nan: must be a finite number in (0, 1e+16] (the "
     "most tokens published for one run are 36T (Qwen3))"),
    (["pricing.usd_per_gpu_hour.a100_80gb=5000"], "pricing.usd_per_gpu_hour.a100_80gb=5000.0: must be a finite "
     "number in [0, 1000] (list prices are at most ~$12 a GPU-hour (AWS p5, H100))"),
    (["pricing.usd_per_kwh=500"], "pricing.usd_per_kwh=500.0: must be a finite number in [0, 100] (electricity "
     "costs well under $1 a kWh)"),
    (["pricing.grid_kg_co2_per_kwh=50"], "pricing.grid_kg_co2_per_kwh=50.0: must be a finite number in [0, 10] (a "
     "coal plant emits about 1 kg CO2 a kWh)"),
]


@pytest.mark.parametrize("extra,message", fast_every(6, OUT_OF_RANGE), ids=[" ".join(e) for e, _ in OUT_OF_RANGE])
def test_out_of_range_is_one_line_with_its_reason(tmp_path, capfd, extra, message):
    run = tmp_path / "run"
    res = run_inprocess([*SIM, *extra, f"hydra.run.dir={run}"], capfd)
    assert res.one_line_error() == f"vtrain: error: {message}"
    assert not run.exists()


def test_weights_that_do_not_fit_the_whole_cluster(tmp_path, capfd):
    res = run_inprocess(["task=simulate", "+model=gpt1t", "+cluster=h200x8", "tracking=off",
                         f"hydra.run.dir={tmp_path}/run"], capfd)
    assert res.one_line_error() == ("vtrain: error: model=gpt1t: its 1,008.0B parameters need 1,878 GiB at 2 bytes "
                                    "each, more than the 1,120 GiB of all 8 GPUs of cluster h200x8: choose a larger "
                                    "cluster")


HEAD = "num_gpus,global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,dp,pp,iteration_time_ms\n"
GOOD = "16,64,1,4096,32,32,2048,8,1,2,2500\n"
# (the bad row, its column and the rule): each refuses the whole file, naming file, row and column
MEASURED_FAULTS = [
    ("16,64,1,4096,32,32,2048,8,1,2,inf\n", "iteration_time_ms=inf", "must be a finite number > 0 (a time)"),
    ("16,64,1,4096,32,32,2048,8,1,2,-5\n", "iteration_time_ms=-5", "must be a finite number > 0 (a time)"),
    ("16,64,1,4096,32,32,2048,8,1,2,0\n", "iteration_time_ms=0", "must be a finite number > 0 (a time)"),
    ("16,64,1,4096,32,-24,2048,8,1,2,2500\n", "num_layers=-24", "must be a whole number >= 0 (a count)"),
    ("8.5,64,1,4096,32,32,2048,8,1,2,2500\n", "num_gpus=8.5", "must be a whole number >= 0 (a count)"),
    ("16,64,1,4096,32,32,2048,nan,1,2,2500\n", "tp=nan", "must be a whole number >= 0 (a count)"),
    ("16,64,1,4096,32,32,inf,8,1,2,2500\n", "seq_len=inf", "must be a whole number >= 0 (a count)"),
]


@pytest.mark.parametrize("bad,cell,rule", fast_every(3, MEASURED_FAULTS), ids=[c for _, c, _ in MEASURED_FAULTS])
def test_a_bad_measured_cell_refuses_the_file(tmp_path, capfd, bad, cell, rule):
    res, rows = validate_table(HEAD + GOOD + bad, tmp_path, capfd)
    assert res.one_line_error() == f"vtrain: error: validate.data={tmp_path / 'measured.csv'}: row 2: {cell}: {rule}"
    assert rows == [] and not (tmp_path / "run").exists()


def test_a_negative_rate_refuses_the_file(tmp_path, capfd):
    head = HEAD.replace("iteration_time_ms", "tokens_per_s_per_gpu")
    res, _ = validate_table(head + "16,64,1,4096,32,32,2048,8,1,2,-1\n", tmp_path, capfd)
    assert res.one_line_error().endswith("row 1: tokens_per_s_per_gpu=-1: must be a finite number >= 0")


def test_a_file_where_no_row_simulates_is_an_error(tmp_path, capfd):
    text = HEAD.replace("\n", ",framework\n") + "16,64,1,4096,32,32,2048,8,1,2,2500,garbage\n" * 2
    res, rows = validate_table(text, tmp_path, capfd)
    line = res.one_line_error()
    assert line.startswith(f"vtrain: error: validate.data={tmp_path / 'measured.csv'}: no row can be simulated "
                           "(2 skipped; row 1: framework='garbage' names no stack")
    assert rows == [] and not (tmp_path / "run").exists()


# overrides that name code or a place outside the run: (overrides, the start of the error line)
CODE = [
    (["+hydra.callbacks.x._target_=builtins.open", "+hydra.callbacks.x._args_=[VICTIM,w]"],
     "hydra.callbacks.x._target_=builtins.open: config is data: _target_ may name only vtrain's callbacks"),
    (["+hydra.callbacks={x:{_target_:os.system,_args_:[touch VICTIM]}}"],
     "hydra.callbacks.x._target_=os.system: config is data"),
    (["hydra.callbacks.run_dir._target_=shutil.rmtree"], "hydra.callbacks.run_dir._target_=shutil.rmtree: config"),
    (["+hydra.callbacks.run_dir._args_=[VICTIM]"], "hydra.callbacks.run_dir._args_: a callback takes only _target_"),
    (["+extra.x._target_=subprocess.call"], "extra.x._target_=subprocess.call: config is data"),
    (["+hydra.job.env_set.LD_PRELOAD=VICTIM"], "hydra.job.env_set.LD_PRELOAD: config is data: LD_PRELOAD makes"),
    (["hydra.job_logging.handlers.file.filename=VICTIM"], "hydra.job_logging.handlers.file.filename=VICTIM: a log"),
    (["hydra.job_logging.handlers.file.class=logging.FileHandler"],
     "hydra.job_logging.handlers.file.class=logging.FileHandler: config is data: a logging class"),
    (["hydra.job_logging.handlers.stdout.stream=ext://os.system"], "hydra.job_logging.handlers.stdout.stream=ext:"),
    (["hydra.searchpath=[file:///tmp]"], "hydra.searchpath: config is data: add config folders with --config-dir"),
    (["hydra.output_subdir=../../elsewhere"], "hydra.output_subdir=../../elsewhere: must be a folder inside"),
]


@pytest.mark.parametrize("extra,start", CODE, ids=[c[0] for c, _ in CODE])
def test_code_in_an_override_is_refused(tmp_path, capfd, extra, start):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    args = [a.replace("VICTIM", str(victim)) for a in extra]
    res = run_inprocess([*SIM, *args, f"hydra.run.dir={tmp_path}/run"], capfd)
    assert res.one_line_error().startswith("vtrain: error: " + start.replace("VICTIM", str(victim)))
    assert victim.read_text() == "keep me\n" and not (tmp_path / "run").exists()


def test_the_shipped_targets_pass():
    for target in ALLOWED_TARGETS:
        assert check_tree("hydra.callbacks.run_dir._target_", target) is None
    assert check_tree("hydra.run.dir", "/anywhere") is None  # the run's own directory is the user's choice


def _config_dir(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "conf" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# (file in --config-dir, its text, the error after the file's path)
USER_FILES = [
    ("experiment/shared.yaml", "# @package _global_\nhydra:\n  callbacks:\n    x:\n      _target_: builtins.open\n"
     "      _args_: [VICTIM, w]\n", ": line 5: hydra.callbacks.x._target_=builtins.open: config is data"),
    ("experiment/store.yaml", "# @package _global_\nsearch:\n  storage: /tmp/elsewhere.journal\n",
     ": line 3: search.storage=/tmp/elsewhere.journal: a config file may name a place to write only inside"),
    ("experiment/fit.yaml", "# @package _global_\ncalibrate:\n  write: true\n",
     ": line 3: calibrate.write=true: a config file may not rewrite the shipped configs"),
    ("model/indent.yaml", "name: mine\nnum_layers: 4\n  hidden_size: 64\n",
     ": line 3, key hidden_size: a key indented where no mapping can start"),
    ("model/tab.yaml", "name: mine\nnum_layers: 4\n\thidden_size: 64\n",
     ": line 3, key hidden_size: a tab character where YAML needs spaces for indentation"),
    ("model/twice.yaml", "name: mine\nnum_layers: 4\nhidden_size: 64\nnum_layers: 8\n",
     ": line 4, key num_layers: appears twice in one mapping (first on line 2)"),
    ("model/bracket.yaml", "name: mine\nnum_layers: [4\nhidden_size: 64\n", ": line "),
    ("model/typo.yaml", "name: mine\nnum_layers: 4\nhiden_size: 64\nnum_heads: 4\n",
     ": line 3, key model.hiden_size: Key 'hiden_size' not in 'ModelConfig'; did you mean hidden_size?"),
    ("model/wrong_type.yaml", "name: mine\nnum_layers: four\nhidden_size: 64\nnum_heads: 4\n",
     ": line 2, key model.num_layers: Value 'four' of type 'str' could not be converted to Integer"),
    ("experiment/unknown.yaml", "# @package _global_\nparalelism:\n  tp: 2\n",
     ": line 2: key paralelism is not a config key; did you mean parallelism?"),
    ("model/deep.yaml", "defaults:\n  - gpt_1_7b\n  - _self_\nname: deep\nnum_layers: 1000000000000\n",
     ": line 5: model.num_layers=1000000000000: must be an integer in [1, 10000] (the deepest published model"),
    ("experiment/big.yaml", "# @package _global_\ntraining:\n  global_batch_size: 100000000\n",
     ": line 3: training.global_batch_size=100000000: must be an integer in [1, 16777216]"),
]


@pytest.mark.parametrize("name,text,message", USER_FILES, ids=[n for n, _, _ in USER_FILES])
def test_a_bad_config_file_is_named_by_file_line_and_key(tmp_path, capfd, name, text, message):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    path = _config_dir(tmp_path, name, text.replace("VICTIM", str(victim)))
    res = run_inprocess(["--config-dir", str(tmp_path / "conf"), *SIM, f"hydra.run.dir={tmp_path}/run"], capfd)
    assert res.one_line_error().startswith(f"vtrain: error: {path.resolve()}{message}")
    assert victim.read_text() == "keep me\n" and not (tmp_path / "run").exists()


# a CLI run on a user folder; the fast loop keeps test_config_dir.py::test_a_simulation_on_configs_of_ones_own
@pytest.mark.slow
def test_a_good_config_dir_still_runs(tmp_path, capfd):
    _config_dir(tmp_path, "model/mine.yaml", "defaults:\n  - gpt_1_7b\n  - _self_\nname: mine\nnum_layers: 12\n")
    res = run_inprocess(["--config-dir", str(tmp_path / "conf"), "task=simulate", "+model=mine", "+cluster=a100x1024",
                         "tracking=off", f"hydra.run.dir={tmp_path}/run"], capfd)
    assert res.code == 0, res.err
    assert (tmp_path / "run" / "report.json").is_file()


def test_a_primary_config_folder_is_checked_too(tmp_path, capfd):
    """--config-path names the folder of the primary config: its files are the user's, checked the same way."""
    path = _config_dir(tmp_path, "config.yaml", "task: simulate\nhydra:\n  callbacks:\n    x:\n"
                       "      _target_: os.system\n")
    res = run_inprocess(["--config-path", str(tmp_path / "conf"), "--config-name", "config", "+model=tiny",
                         "+cluster=local_cpu", f"hydra.run.dir={tmp_path}/run"], capfd)
    assert res.one_line_error().startswith(f"vtrain: error: {path.resolve()}: line 5: hydra.callbacks.x._target_="
                                           "os.system: config is data")
