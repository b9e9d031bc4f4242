"""Bad input: one line naming the field and the rule, exit code 2, no traceback, nothing written.

Most cases run the command line in-process (tests/clirun.py); a few run it as a real process."""
import json
from pathlib import Path

import pytest

from tests.clirun import run_inprocess, run_subprocess
from tests.sampling import fast_every

BASE = ["task=simulate", "+model=gpt175b", "+cluster=a100x1024"]

# the core's rules, shown by the CLI as the core's one line
CORE_RULES = [
    (["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=16"], "exceeds the 1024 GPUs"),
    (["parallelism.tp=5", "parallelism.pp=1", "parallelism.dp=1"], "tp=5 must divide attention heads=96"),
    (["parallelism.tp=8", "parallelism.pp=4", "parallelism.dp=1", "parallelism.first_stage_layers=20"],
     "first_stage_layers=20 / last_stage_layers=0 leave 76 layers, which must divide evenly over the other 3 stage(s)"),
    (["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=1", "parallelism.zero_stage=3"],
     "zero_stage=3 needs dp*cp>1"),
    (["parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=1", "parallelism.cp=3"], "2*cp=2*3 must divide seq_len"),
    (["parallelism.tp=8", "parallelism.pp=1", "parallelism.dp=1", "training.precision=nvfp4"],
     "mxfp8 and nvfp4 need a Blackwell GPU"),
    (["parallelism.tp=8", "parallelism.pp=2", "parallelism.dp=7"], "must divide global_batch_size=1536"),
    # a batch that does not divide names the batch, not the zero micro-batches a schedule then counts
    (["parallelism.tp=8", "parallelism.pp=2", "parallelism.dp=4", "parallelism.schedule=zbv",
      "training.global_batch_size=2"], "dp*micro_batch_size=4*1 must divide global_batch_size=2"),
    (["parallelism.tp=0"], "parallelism.tp=0: must be an integer in [1, 4194304] (a degree of parallelism is at "
                           "most the GPUs"),
    (["parallelism.micro_batch_size=-1"], "parallelism.micro_batch_size=-1: must be an integer in [1, 16777216]"),
    (["model.hidden_size=0"], "model.hidden_size=0: must be an integer in [1, 1048576] (the widest published model "
                              "has hidden size 20,480"),
    (["model.vocab_divisible_by=-1"], "model.vocab_divisible_by=-1: must be an integer in [0, 65536]"),
    (["parallelism.schedule=zigzag"], "parallelism.schedule=zigzag is not one of"),
    # finite but physically meaningless constants overflow the report to inf/nan: a physical range instead
    (["stack.optimizer_bytes_per_param=1e308"], "stack.optimizer_bytes_per_param=1e+308: must be a finite number in "
                                                "(0, 1024]"),
    (["stack.host_time_per_kernel_s=1e308"], "stack.host_time_per_kernel_s=1e+308: must be a finite number in [0, 1]"),
    (["stack.loss_bytes_per_logit=1e308"], "stack.loss_bytes_per_logit=1e+308: must be a finite number in (0, 1024]"),
    (["training.tokens_to_train=1e308"], "training.tokens_to_train=1e+308: must be a finite number in (0, "),
    # GPU, network and price constants: physical ranges (a huge GEMM size term divided by zero; tiny rates and
    # huge prices gave inf costs)
    (["+gpu=a100_80gb", "gpu.gemm_half_efficiency_dim=1e300"],
     "gpu.gemm_half_efficiency_dim=1e+300: must be a finite number in [0, 1000000]"),
    (["+gpu=a100_80gb", "gpu.hbm_bandwidth_gb_per_s=1e-300"],
     "gpu.hbm_bandwidth_gb_per_s=1e-300: must be a finite number in [0.001, 1000000]"),
    (["+gpu=a100_80gb", "gpu.kernel_time_s=1e300"], "gpu.kernel_time_s=1e+300: must be a finite number in [0, 1]"),
    (["+gpu=a100_80gb", "gpu.peak_tflops.bf16=1e300"], "gpu.peak_tflops.bf16=1e+300: must be a finite number in"),
    (["+gpu=a100_80gb", "gpu.idle_w=1000"], "gpu.idle_w=1000 must be <= gpu.tdp_w=400"),
    (["cluster.inter_node.bandwidth_gb_per_s=1e-300"],
     "cluster.inter_node.bandwidth_gb_per_s=1e-300: must be a finite number in [0.001, 1000000]"),
    (["training.optimizer=sgd"], "training.optimizer=sgd is not one of adam, adamw"),
    (["stack=deepspeed", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8", "parallelism.zero_stage=3"],
     "parallelism.zero_stage=3 with pp=16: stack=deepspeed runs ZeRO stages up to 1 under a pipeline"),
    (["parallelism.tp=8", "parallelism.pp=4", "parallelism.dp=1", "parallelism.virtual_stages=2"],
     "parallelism.virtual_stages=2 needs schedule=interleaved (schedule=1f1b runs 1 model chunk(s) per stage)"),
    (["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8", "parallelism.schedule=interleaved",
      "parallelism.virtual_stages=2", "training.global_batch_size=1512"],
     "pp=16 must divide the number of micro-batches=189 with schedule=interleaved (Megatron-Core runs them in groups"),
    (["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8", "parallelism.schedule=zbv",
      "parallelism.first_stage_layers=5", "parallelism.last_stage_layers=5"],
     "first_stage_layers / last_stage_layers do not apply to schedule=zbv: its V shape puts the first and the last"),
    (["training.optimizer_moments=fp16"], "training.optimizer_moments=fp16 is not one of fp32, bf16"),
    (["cluster.nvlink_domain=3"], "cluster.nvlink_domain=3 must be 0 (one node), a multiple of gpus_per_node=8"),
    (["pricing.usd_per_gpu_hour.a100_80gb=1e308"],
     "pricing.usd_per_gpu_hour.a100_80gb=1e+308: must be a finite number in [0, 1000] (list prices are at most"),
]

# 20 common mistakes on the command line, each with the one line it must give
MISTAKES = [
    (["parallelism.tpp=4"], "parallelism.tpp is not a config key; did you mean parallelism.tp?"),
    (["paralelism.tp=8"], "paralelism.tp is not a config key; did you mean parallelism.tp?"),
    (["parallelism.tp=abc"], "parallelism.tp=abc: must be an integer"),
    (["model.hidden_size=1e3"], "model.hidden_size=1e3: must be an integer"),
    (["parallelism.sequence_parallel=maybe"], "parallelism.sequence_parallel=maybe: must be true or false"),
    (["parallelism.tp=null"], "parallelism.tp=null: must be an integer (it cannot be null)"),
    (["search.micro_batch_sizes=[1,a]"], "search.micro_batch_sizes=[1,a]: must be a list of integers"),
    (["+parallelism.foo=1"], "parallelism.foo is not a config key; parallelism has: account_for_embedding,"),
    (["+foo=1"], "foo is not a config key"),
    # a mapping set with an entry it lacks: the key exists, the entry goes in with + (it said "not a config key")
    (["pricing.usd_per_gpu_hour={foo:1.0}"],
     "pricing.usd_per_gpu_hour has no entry 'foo' to set: add one with +pricing.usd_per_gpu_hour.foo=<value>"),
    (["+mdoel=gpt175b"], "mdoel is not a config key; did you mean +model=<name>?"),
    (["+parallelism.tp=8"], "parallelism.tp is already set: write parallelism.tp=<value> without +"),
    (["+parallelism=megatron_gpt3"], "parallelism is chosen by default; write parallelism=megatron_gpt3 (without +)"),
    (["cluster.gpu=../../etc/x"], "cluster.gpu=../../etc/x is unknown; one of: a100_40gb,"),
    (["cluster.gpu=../gpu/h100_sxm"], "cluster.gpu=../gpu/h100_sxm is unknown (did you mean h100_sxm?)"),
    (["+gpu=../model/gpt175b"], "gpu=../model/gpt175b is unknown"),
    (["parallelism.tp=4,8"], "parallelism.tp=4,8 is a sweep: add -m"),
    (["parallelism.recompute_modules=core_attn,mlp"],
     "a value with commas in it is quoted: 'parallelism.recompute_modules=\"core_attn,mlp\"'"),
    (["task=simulat"], "task=simulat is not one of search, simulate,"),
    (["--model"], "unknown option --model: overrides are key=value"),
    (["parallelism.tp"], "cannot read 'parallelism.tp': no '='"),
    (["~parallelism"], "~parallelism: removing config entries (~) is not supported"),
    (["training.precision=fp9"], "training.precision=fp9 is not one of"),
]


@pytest.mark.parametrize("overrides,message", fast_every(12, CORE_RULES + MISTAKES),
                         ids=[" ".join(o) for o, _ in CORE_RULES + MISTAKES])
def test_mistake_is_one_line_with_exit_2(tmp_path, capfd, overrides, message):
    run_dir = tmp_path / "run"
    res = run_inprocess([*BASE, *overrides, f"hydra.run.dir={run_dir}"], capfd)
    line = res.one_line_error()
    assert message in line
    assert not run_dir.exists()  # nothing half-written, no run directory left


@pytest.mark.slow  # a CLI run; the fast loop keeps test_mistake_is_one_line_with_exit_2's sample
def test_a_presets_choice_is_replaced_without_plus(tmp_path, capfd):
    """+experiment=... selects model and cluster in its defaults list: Hydra replaces that choice with model=<name>
    and refuses a second +model= ("Multiple values for model. To override a value use 'override model: ...'")."""
    res = run_inprocess(["+experiment=gpt3_megatron", "+model=llama3_8b", f"hydra.run.dir={tmp_path / 'a'}"], capfd)
    assert res.code == 2 and res.one_line_error() == (
        "vtrain: error: +model=llama3_8b: +experiment=gpt3_megatron selects model already; write model=llama3_8b "
        "(without +) to replace its choice")
    res = run_inprocess(["+experiment=gpt3_megatron", "model=llama3_8b", "cluster=h100x1024", "tracking=off",
                         f"hydra.run.dir={tmp_path / 'b'}"], capfd)
    assert res.code == 0, res.err
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert (report["model"], report["cluster"]) == ("llama3_8b", "h100x1024")


def test_without_plus_and_model_missing(tmp_path, capfd):
    assert "write +model=gpt175b" in run_inprocess(["task=simulate", "model=gpt175b", "+cluster=a100x1024"],
                                                   capfd).one_line_error()
    line = run_inprocess(["task=simulate", "+cluster=a100x1024", f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()
    assert "model is not set: add +model=<name>, one of:" in line and not (tmp_path / "r").exists()


@pytest.mark.parametrize("args,message", fast_every(3, [
    (["task=simulate", "+model=gpt9000", "+cluster=a100x1024"],
     "model=gpt9000 is unknown; one of: bloom_176b, bloom_7b1, deepseek_v2, deepseek_v2_lite, deepseek_v3, gpt175b"),
    (["task=simulate", "+model=gpt175b", "+cluster=nowhere"], "cluster=nowhere is unknown"),
    (["task=simulate", "+model=gpt175b"], "cluster is not set: add +cluster=<name>, one of:"),
    (["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "+gpu=tpu"], "gpu=tpu is unknown"),
    (["task=dance", "+model=gpt175b", "+cluster=a100x1024"], "task=dance is not one of"),
    (["task=calibrate", "+cluster=vtrain_a100", "calibrate.fit_on=weak"],
     "calibrate.fit_on=weak is not one of joint, single_node, weak_scaling"),
    (["task=calibrate", "+cluster=vtrain_a100", "calibrate.fit_on=weak_scaling"],
     "calibrate.fit_on=weak_scaling needs calibrate.folds=none (got hidden_size)"),
    (["task=calibrate", "+cluster=vtrain_a100", "calibrate.constants=[gemm_max_efficiency,vocab]"],
     "calibrate.constants=vocab must name constants among gemm_max_efficiency"),
    (["task=calibrate", "+cluster=vtrain_a100", "calibrate.fit_on=single_node", "calibrate.folds=weak_scaling"],
     "calibrate.folds=weak_scaling needs calibrate.fit_on=joint"),
    (["task=validate", "+cluster=vtrain_a100", "validate.data=a100_single_node", "validate.show_rows=-1"],
     "validate.show_rows=-1: must be an integer in [0, 1000000000]"),
    (["task=validate", "+cluster=vtrain_a100", "validate.data=a100_single_node", "cost.model=profile"],
     "cost.model=profile is not supported by task=validate"),
    (["task=calibrate", "+cluster=h100x1024"], "calibrate.data is not set, and the shipped single-node runs ran on "
                                               "A100 80 GB: fitting gpu=h100_sxm to them"),
]))
def test_unknown_names(tmp_path, capfd, args, message):
    assert message in run_inprocess([*args, f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()


MEASURED_CELLS = [("abc", "row 1: iteration_time_ms=abc is not a number"),
                  ("nan", "row 1: iteration_time_ms=nan: must be a finite number > 0"),
                  ("", "row 1: iteration_time_ms, iteration_time_s, step_time_s, tokens_per_s_per_gpu")]


@pytest.mark.parametrize("cell,message", fast_every(3, MEASURED_CELLS), ids=[c or "empty" for c, _ in MEASURED_CELLS])
def test_calibrate_checks_the_measured_column_as_validate_does(tmp_path, capfd, cell, message):
    data = tmp_path / "runs.csv"
    head = "global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,pp,dp,iteration_time_ms\n"
    data.write_text(head + f"16,8,1024,16,24,1024,1,2,1,{cell}\n16,8,1024,16,24,1024,1,2,1,372.2\n")
    line = run_inprocess(["task=calibrate", "+cluster=vtrain_a100", f"calibrate.data={data}", "calibrate.folds=none",
                          f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()
    assert f"calibrate.data={data}: {message}" in line and not (tmp_path / "r").exists()


@pytest.mark.parametrize("value", fast_every(2, ["abc", "null", "0", "1.5"]))
def test_calibrate_max_evals_is_a_positive_integer(tmp_path, capfd, value):
    line = run_inprocess(["task=calibrate", "+cluster=vtrain_a100", "calibrate.folds=none",
                          f"+extra.max_evals={value}", f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()
    assert "must be an integer in [1, 1000000]" in line and line.startswith("vtrain: error: extra.max_evals=")


def test_calibrate_folds_need_two_groups(tmp_path, capfd):
    data = tmp_path / "runs.csv"
    data.write_text("global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,pp,dp,iteration_time_ms\n"
                    "16,8,1024,16,24,1024,1,2,1,372.2\n32,4,1024,16,24,1024,2,2,2,219.7\n")
    line = run_inprocess(["task=calibrate", "+cluster=vtrain_a100", f"calibrate.data={data}",
                          "calibrate.folds=hidden_size", "calibrate.fit_on=single_node",
                          f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()
    assert "calibrate.folds=hidden_size: the data holds one hidden_size group (1024)" in line


def test_real_process_one_line_and_exit_2(tmp_path):
    """The same in a real interpreter: a command-line mistake and a core rule."""
    for extra, message in (["parallelism.tpp=4"], "did you mean parallelism.tp?"), \
                          (["parallelism.tp=5", "parallelism.pp=1", "parallelism.dp=1"], "tp=5 must divide"):
        res = run_subprocess([*BASE, *extra], tmp_path)
        assert message in res.one_line_error()
        assert not (tmp_path / "outputs").exists() or not any(p.is_file() for p in (tmp_path / "outputs").rglob("*"))


def test_help_lists_tasks_groups_and_examples(capfd):
    from vtrain.cli.overrides import TASKS, groups

    res = run_inprocess(["--help"], capfd)
    assert res.code == 0
    for task in TASKS:
        assert f"  {task} " in res.out
    for group in groups():
        assert f"\n{group}: " in res.out
    examples = [ln for ln in res.out.splitlines() if ln.strip().startswith("python -m vtrain")]
    assert len(examples) >= 5 and "== Examples ==" in res.out
    assert "peak_tflops" not in res.out  # not Hydra's 150-line config dump


def test_help_examples_are_valid_commands():
    """Every example of --help passes the command-line check (names, keys, types)."""
    import shlex

    from vtrain.cli.overrides import check_argv

    text = (Path(__file__).resolve().parents[1] / "vtrain" / "conf" / "hydra" / "help" / "vtrain.yaml").read_text()
    examples = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("python -m vtrain +")
                or ln.strip().startswith("python -m vtrain task") or ln.strip().startswith("python -m vtrain -m")]
    assert len(examples) == 5
    for ex in examples:
        check_argv(shlex.split(ex)[3:])


def test_multirun_bad_job_fails_alone_and_sweep_summary(tmp_path, capfd):
    """In a sweep, a job with bad input fails (its one line on stderr), the others run, the sweep writes
    sweep_summary.csv with one row per job and exits with 2."""
    import csv

    sweep = tmp_path / "sweep"
    res = run_inprocess(["-m", *BASE, "parallelism.tp=5,8", "parallelism.pp=16", "parallelism.dp=8",
                         "tracking.enabled=false", f"hydra.sweep.dir={sweep}"], capfd)
    assert res.code == 2
    assert "vtrain: error: tp=5 must divide attention heads=96" in res.err and "Traceback" not in res.err
    assert len(list(sweep.rglob("report.json"))) == 1 and not (sweep / "0").exists()  # the tp=8 job
    rows = list(csv.DictReader((sweep / "sweep_summary.csv").open()))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "error"), ("1", "ok")]
    assert "tp=5 must divide" in rows[0]["error"] and "parallelism.tp=5" in rows[0]["overrides"]
    assert float(rows[1]["days_to_train"]) > 0 and float(rows[1]["mfu_pct"]) > 1  # percent, not a fraction
    assert "(tp,pp,dp)=(8,16,8)" in rows[1]["plan"]
    assert "#0 parallelism.tp=5: error: tp=5 must divide" in res.out and "fastest job: #1" in res.out


def test_an_unusable_run_directory_is_one_line(tmp_path, capfd):
    """hydra.run.dir naming a file, or a path under one: one line, and the file is left as it was."""
    blocker = tmp_path / "a_file"
    blocker.write_text("mine")
    for run_dir, why in ((blocker, "File exists"), (blocker / "sub", "Not a directory")):
        line = run_inprocess([*BASE, f"hydra.run.dir={run_dir}"], capfd).one_line_error()
        assert "hydra.run.dir" in line and why in line
    assert blocker.read_text() == "mine"


@pytest.mark.parametrize("device", fast_every(2, ["nope", "cuda:-1"]))
def test_a_bad_profile_device_is_one_line(tmp_path, capfd, device):
    run_dir = tmp_path / "run"
    res = run_inprocess(["task=profile", "+model=tiny", f"profile.device={device}", f"hydra.run.dir={run_dir}"], capfd)
    assert f"profile.device={device} is not one of cpu, cuda" in res.one_line_error()
    assert not run_dir.exists()


@pytest.mark.parametrize("args,message", fast_every(3, [
    (["+casestudy=multitenant", "case_study.params.plan_micro_batch_sizes=[0]"],
     "case_study.params.plan_micro_batch_sizes=[0] must be a non-empty list of integers >= 1"),
    (["+casestudy=multitenant", "case_study.params.plan_recompute=[wat]"],
     "case_study.params.plan_recompute=['wat'] must be a non-empty list of"),
    (["+casestudy=compute_optimal", "+case_study.params.loss.alpha=0"],
     "case_study.params.loss.alpha=0.0 must be a number in"),
    (["+casestudy=compute_optimal", "+case_study.params.loss.E=-100"], "case_study.params.loss.E=-100.0 must be"),
    (["task=simulate", "+model=gpt_1_7b", "+cluster=h200x8", "hydra.run.dir=/tmp/x${oops}"],
     "hydra.run.dir: Interpolation key 'oops' not found"),
]))
def test_case_study_parameters_and_interpolations_are_one_line(tmp_path, capfd, args, message):
    extra = [] if any(a.startswith("hydra.run.dir") for a in args) else [f"hydra.run.dir={tmp_path / 'run'}"]
    res = run_inprocess([*args, "tracking.enabled=false", *extra], capfd)
    assert message in res.one_line_error()
    assert not (tmp_path / "run").exists()


def test_a_name_that_is_the_first_word_of_an_option_suggests_that_option():
    """cluster.gpu=h100 suggests h100_sxm (its first word), not the nearer-spelt v100."""
    from vtrain.cli.keys import closest

    assert closest("h100", ["a100_80gb", "h100_96gb_500w", "h100_sxm", "v100"]) == "h100_sxm"
    assert closest("v10", ["h100_sxm", "v100"]) == "v100"  # no first-word match: the nearest spelling
    assert closest("", ["h100_sxm"]) is None


CALIBRATE_ROWS = {
    "mixed_gpus": ("model,gpu,num_gpus,tp,pp,dp,micro_batch,global_batch,seq_len,precision,tokens_per_s_per_gpu\n"
                   "llama3_8b,h100_sxm,8,1,1,8,1,64,8192,bf16,8000\nllama3_8b,b200,8,1,1,8,1,64,8192,mxfp8,20000\n",
                   ["+cluster=h100x1024", "calibrate.fit_on=single_node"],
                   "row 2 runs on gpu=b200 with stack=megatron_core_te, row 1 on gpu=h100_sxm"),
    "not_a100_joint": ("model,gpu,num_gpus,tp,pp,dp,micro_batch,global_batch,seq_len,tokens_per_s_per_gpu\n"
                       "llama3_8b,h100_sxm,8,1,1,8,1,64,8192,8000\n", ["+cluster=h100x1024"],
                       "calibrate.fit_on=joint also fits the Megatron-LM weak-scaling table, measured on A100 80 GB"),
    "tiny_time": ("global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,pp,dp,iteration_time_ms\n"
                  "32,4,1024,16,24,1024,2,2,2,1e-300\n", ["+cluster=vtrain_a100"],
                  "row 1: the measurement gives an iteration of 1e-300 ms (outside 1e-6 .. 1e15 ms"),
    "bad_shape": ("global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,pp,dp,iteration_time_ms\n"
                  "32,4,1024,15,24,1024,2,2,2,300\n", ["+cluster=vtrain_a100"],
                  "row 1: model.num_heads=15 must divide model.hidden_size=1024"),
    "underscore": ("global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,pp,dp,iteration_time_ms\n"
                   "32,4,1024,16,24_0,1024,2,2,2,300\n", ["+cluster=vtrain_a100"], "num_layers=24_0"),
    "implausible": ("global_batch,micro_batch,hidden_size,num_heads,num_layers,seq_len,tp,pp,dp,iteration_time_ms\n"
                    "32,4,1024,16,24,1024,2,2,2,3e7\n", ["+cluster=vtrain_a100"],
                    "every row's measurement is more than 20x from its prediction"),
}


@pytest.mark.parametrize("case", fast_every(3, sorted(CALIBRATE_ROWS)))
def test_calibrate_refuses_data_it_cannot_fit(tmp_path, capfd, case):
    """One GPU and stack per fit, A100 weak-scaling rows only for A100 data, validate's checks of each row, and
    the row named in each message (fuzzed: these crashed or fitted garbage)."""
    text, extra, message = CALIBRATE_ROWS[case]
    data = tmp_path / "runs.csv"
    data.write_text(text)
    line = run_inprocess(["task=calibrate", *extra, f"calibrate.data={data}", "calibrate.folds=none",
                          "+extra.max_evals=2", f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()
    assert message in line and not (tmp_path / "r").exists()


@pytest.mark.slow  # a calibration; CI runs it
def test_calibrate_keeps_to_its_evaluation_budget():
    from vtrain import compose
    from vtrain.calibration.fit import Constants, Dataset, fit_constants
    from vtrain.validation.datasets import single_node_workloads

    ws, measured, _ = single_node_workloads(compose(["+cluster=vtrain_a100"], require=False).cluster)
    data = [Dataset("single_node", ws[:4], measured[:4])]
    fit = fit_constants(data, Constants.of(ws[0]), ["host_time_per_kernel_s"], max_evals=20)
    assert fit.evaluations <= 20 + 2  # one run: scipy's simplex start may add its initial points


def test_validate_reads_a_csv_as_a_table_means_it(tmp_path, capfd):
    """A blank line before the header, an input column named like a result column, num_gpus against
    num_nodes x gpus_per_node, a '$' in the file name (matplotlib mathtext in the plot's title)."""
    data = tmp_path / "m$\\nosuch$.csv"
    data.write_text("\nmodel,gpu,num_gpus,num_nodes,gpus_per_node,tp,pp,dp,micro_batch,global_batch,seq_len,"
                    "tokens_per_s_per_gpu,error_pct\n"
                    "llama3_8b,h100_sxm,8,1,8,1,1,8,1,64,8192,8000,mine\n"
                    "llama3_8b,h100_sxm,8,2,8,1,1,8,1,64,8192,8000,mine\n")
    res = run_inprocess(["task=validate", "+cluster=h100x1024", f"validate.data='{data}'",
                         f"hydra.run.dir={tmp_path}/r"], capfd)
    assert res.code == 0, res.err
    assert "row 2: num_gpus=8 disagrees with num_nodes=2 x gpus_per_node=8" in res.out
    header = (tmp_path / "r" / "validation.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header)) and "error_pct_input" in header and "error_pct" in header
    assert (tmp_path / "r" / "validation.png").stat().st_size > 0


def test_an_output_that_cannot_be_written_is_one_line(tmp_path, capfd):
    """A directory where report.json goes (fuzzed: a traceback from os.replace)."""
    (tmp_path / "r" / "report.json").mkdir(parents=True)
    res = run_inprocess(["task=simulate", "+model=gpt_1_7b", "+cluster=h200x8", "parallelism.tp=2",
                         "parallelism.pp=2", f"hydra.run.dir={tmp_path}/r"], capfd)
    assert res.code == 2 and f"cannot write {tmp_path}/r/report.json (Is a directory)" in res.one_line_error()


# two CLI runs; the fast loop keeps
# test_cli_outputs.py::test_bad_input_in_the_current_directory_removes_only_what_it_wrote
@pytest.mark.slow
def test_a_bad_input_puts_back_the_previous_runs_config(tmp_path, capfd):
    """A second run into a run directory that fails on its input leaves the first run's .hydra copies (Hydra
    had overwritten them with the failed run's overrides)."""
    args = ["task=simulate", "+model=gpt_1_7b", "+cluster=h200x8", "parallelism.tp=2", "parallelism.pp=2",
            f"hydra.run.dir={tmp_path}/r"]
    assert run_inprocess(args, capfd).code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "r" / ".hydra").iterdir()}
    assert run_inprocess([*args, "parallelism.tp=5"], capfd).code == 2
    assert {p.name: p.read_bytes() for p in (tmp_path / "r" / ".hydra").iterdir()} == before


@pytest.mark.slow  # a CLI run; the fast loop keeps test_mistake_is_one_line_with_exit_2's sample
def test_a_gpu_without_bf16_refuses_it(tmp_path, capfd):
    """V100 inherits the A100's efficiency constants, not its bf16 and tf32 peaks (fuzzed: bf16 ran on it)."""
    line = run_inprocess(["task=simulate", "+model=gpt_1_7b", "+cluster=h100x1024", "cluster.gpu=v100",
                          f"hydra.run.dir={tmp_path}/r"], capfd).one_line_error()
    assert "precision=bf16 needs a bf16 peak, which gpu=v100 does not have (fp16, fp32)" in line


@pytest.mark.slow
@pytest.mark.parametrize("script, args, line", [
    ("deepseek_v3_h800.py", ["search.seed=abc"], "vtrain: error: search.seed=abc: must be an integer"),
    ("cheapest_by_deadline.py", ["parallelism.tpp=3"],
     "vtrain: error: parallelism.tpp is not a config key; did you mean parallelism.tp?"),
    ("cheapest_by_deadline.py", ["--days", "abc"],
     "vtrain: error: --days=abc: must be comma-separated numbers of days in (0, 1000000)"),
])
def test_the_sweep_scripts_check_their_input_as_the_cli_does(tmp_path, script, args, line):
    """sweeps/ scripts compose with the Python API, which skipped the command line's checks: a bad override
    ended in a ConfigError traceback (or Hydra's 'Error merging override')."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "sweeps" / script), *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [line]


@pytest.mark.parametrize("args, line", [
    (["+model=gpt175b", "+cluster=a100x1024", "--cfg"], "vtrain: error: --cfg needs a value (e.g. --cfg job)"),
    (["+model=gpt175b", "--cfg=bogus"],
     "vtrain: error: --cfg bogus: is not one of job, hydra, all (the config to show)"),
    (["+model=gpt175b", "--config-dir"], "vtrain: error: --config-dir needs a value (e.g. --config-dir <dir>)"),
    (["-cd"], "vtrain: error: -cd needs a value (e.g. -cd <dir>)"),
])
def test_a_hydra_flag_without_its_value_is_one_line(capfd, args, line):
    """Hydra's argparse printed its usage (several lines) for these."""
    res = run_inprocess(args, capfd)
    assert res.code == 2 and res.err.strip().splitlines() == [line]
