"""Measured-run CSVs as published tables write them (task=validate): degree cells of 0 or below are one-line
skip reasons naming their column, and the headers, model, GPU, precision and framework names, numbers,
placeholders and booleans of NeMo, Megatron, torchtitan and llm-foundry tables are read, not skipped."""
import csv
import logging

import pytest

from vtrain import compose
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import normalise_header, read_measurements
from vtrain.validation.rows import cell_number, enum_key, gpu_key, model_name, row_workload
from vtrain.validation.run import validate_rows
from vtrain.workload.enums import Recompute

BASE = {"num_gpus": "64", "global_batch": "128", "micro_batch": "1", "model": "llama3_8b", "seq_len": "8192",
        "tp": "2", "pp": "1", "gpu": "H100", "step_time_s": "2.0"}


@pytest.fixture(scope="module")
def cfg():
    return compose(["+cluster=h100x1024"], require=False)


def _csv(tmp_path, rows, name="rows.csv"):
    """A CSV of ``rows`` (dicts; the header: their keys in the order first seen) in ``tmp_path``."""
    header = list(dict.fromkeys(k for r in rows for k in r))
    p = tmp_path / name
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows([[r.get(k, "") for k in header] for r in rows])
    return p


def _workload(cfg, tmp_path, **changes):
    (row,) = read_measurements(_csv(tmp_path, [{**BASE, **changes}]))
    return row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)


# --- 1. degrees of 0 or below: a one-line reason naming the column, never a ZeroDivisionError

@pytest.mark.parametrize("column,value,rule", [
    ("tp", "0", ">= 1"), ("cp", "0", ">= 1"), ("pp", "0", ">= 1"), ("cp", "-8", ">= 1"), ("ep", "0", ">= 1"),
    ("etp", "-8", ">= 0"), ("virtual_stages", "0", ">= 1"), ("micro_batch", "0", ">= 1"),
    ("global_batch", "-8", ">= 1"), ("seq_len", "0", ">= 1"), ("num_gpus", "0", ">= 1"), ("num_gpus", "-8", ">= 1"),
    ("dp", "0", ">= 1"),
])
def test_a_degree_of_zero_or_below_names_its_column(tmp_path, cfg, column, value, rule):
    with pytest.raises(ConfigError) as err:
        _workload(cfg, tmp_path, **{column: value})
    negative = f"validate.data={tmp_path / 'rows.csv'}: row 1: {column}={value}: must be a whole number >= 0 (a count)"
    if value.startswith("-"):
        assert str(err.value) == negative
    else:  # the rule's lower end, and the upper end of a plausible run (vtrain.workload.bounds)
        low = rule.split()[-1]  # rows' own counts (num_gpus, dp) say the lower end alone
        assert str(err.value).startswith((f"row 1: {column}={value}: must be an integer in [{low}, ",
                                          f"row 1: {column}={value}: must be an integer {rule}"))


def test_tp_zero_with_the_gpus_given_is_the_rows_skip_reason(tmp_path, cfg):
    nodes = {k: v for k, v in BASE.items() if k != "num_gpus"}
    p = _csv(tmp_path, [{**BASE, "tp": "0", "num_nodes": "", "gpus_per_node": ""},
                        {**nodes, "num_gpus": "", "cp": "0", "num_nodes": "8", "gpus_per_node": "8"},
                        {**nodes, "num_gpus": "", "cp": "1", "num_nodes": "0", "gpus_per_node": "8"},
                        {**nodes, "num_gpus": "", "cp": "1", "num_nodes": "8", "gpus_per_node": "0"}])
    reasons = [r.skipped_reason for r in validate_rows(read_measurements(p), cfg, defaults=None)]
    assert [r.split(" (")[0] for r in reasons] == [
        "row 1: tp=0: must be an integer in [1, 4194304]", "row 2: cp=0: must be an integer in [1, 4194304]",
        "row 3: num_nodes=0: must be an integer >= 1", "row 4: gpus_per_node=0: must be an integer >= 1"]


def test_empty_tp_and_pp_cells_are_one_like_absent_cp_and_ep(tmp_path, cfg):
    w = _workload(cfg, tmp_path, tp="", pp="-")
    assert (w.plan.tp, w.plan.pp, w.plan.cp, w.plan.ep, w.plan.dp, w.plan.chunks) == (1, 1, 1, 1, 64, 1)


# --- 2. header spellings

@pytest.mark.parametrize("header,column", [
    ("#-GPUs", "num_gpus"), ("#GPUs", "num_gpus"), ("# GPUs", "num_gpus"), ("World Size", "num_gpus"),
    ("Tokens / sec / GPU", "tokens_per_s_per_gpu"), ("Model TFLOP / sec / GPU", "model_tflops_per_gpu"),
    ("Model TFLOP/s/GPU", "model_tflops_per_gpu"), ("TFLOPs/GPU", "model_tflops_per_gpu"),
    ("Step time (s)", "step_time_s"), ("Step Time (ms)", "iteration_time_ms"), ("TPS/GPU", "tokens_per_s_per_gpu"),
    ("Throughput (tokens/s/GPU)", "tokens_per_s_per_gpu"), ("Throughput (Tok/s/GPU)", "tokens_per_s_per_gpu"),
    ("Tokens/sec", "tokens_per_s"), ("Samples/sec", "samples_per_s"), ("Tensor Parallel", "tp"),
    ("Pipeline Parallel", "pp"), ("Local batch size", "local_batch"), ("SeqLen (T)", "seq_len"),
    ("MicroBatchSize", "micro_batch"), ("GlobalBatchSize", "global_batch"), ("Activation checkpointing", "recompute"),
    ("AC", "recompute"), ("torch.compile", "torch_compile"), ("Peak Memory (GB)", "peak_memory_gb"),
    ("Memory(GiB)", "peak_memory_gib"), ("VP", "virtual_stages"), ("VPP", "virtual_stages"),
    # the spellings read before stay as they were
    ("iteration time (ms)", "iteration_time_ms"), ("Tokens/sec/GPU", "tokens_per_s_per_gpu"),
    ("Seq Length", "seq_len"), ("peak_mem_GiB", "peak_memory_gib"), ("step_time_sec", "step_time_s"),
    # Megatron-LM's argument names, NeMo's spelled-out headers, llm-foundry's one-letter rates, batches in tokens
    ("Tensor Parallel Size", "tp"), ("Tensor model-parallel size", "tp"), ("Pipeline Parallel Size", "pp"),
    ("Data Parallel Size", "dp"), ("Context Parallel Size", "cp"), ("Context-parallel size", "cp"),
    ("Expert Parallel Size", "ep"), ("Expert Tensor Parallel", "etp"), ("GPU Type", "gpu"), ("Hardware", "gpu"),
    ("Accelerator", "gpu"), ("# of Accelerators", "num_gpus"), ("Dtype", "precision"), ("Data type", "precision"),
    ("Mixed Precision", "precision"), ("Microbatch Size", "micro_batch"), ("Model Name", "model"),
    ("Context Length", "seq_len"), ("SP", "sequence_parallel"), ("Time per step (ms)", "iteration_time_ms"),
    ("Elapsed time per iteration (ms)", "iteration_time_ms"), ("Time/iter (ms)", "iteration_time_ms"),
    ("Tokens/GPU/s", "tokens_per_s_per_gpu"), ("Peak mem (GiB)", "peak_memory_gib"),
    ("Max Memory Allocated (GB)", "peak_memory_gb"), ("Throughput/GPU (tokens/s)", "tokens_per_s_per_gpu"),
    ("Throughput (T/s/GPU)", "tokens_per_s_per_gpu"), ("Throughput (T/s)", "tokens_per_s"),
    ("Throughput (S/s)", "samples_per_s"), ("GBS (tokens)", "global_batch_tokens"),
    ("GlobalBatchSize (T)", "global_batch_tokens"), ("Global Batch Size (tokens)", "global_batch_tokens"),
    ("Sharding Strategy", "sharding_strategy"), ("FSDP", "fsdp"), ("ZeRO Stage", "zero_stage"),
])
def test_published_headers_name_the_schema_columns(header, column):
    assert normalise_header(header) == column


def test_batches_in_tokens_and_torchtitans_local_batch(tmp_path, cfg):
    """A global batch in tokens is divided by the sequence length; torchtitan's local batch is each rank's
    batch, split into pp micro-batches under a pipeline (its default pipeline_parallel_microbatches)."""
    w = _workload(cfg, tmp_path, global_batch="", global_batch_tokens="1048576")
    assert w.plan.global_batch_size == 1048576 // 8192 == 128
    with pytest.raises(ConfigError, match=r"^row 1: global_batch_tokens=1000 must be a positive multiple of "
                                          r"seq_len=8192$"):
        _workload(cfg, tmp_path, global_batch="", global_batch_tokens="1000")
    w = _workload(cfg, tmp_path, num_gpus="512", model="llama3_405b", tp="8", pp="8", micro_batch="",
                  global_batch="", local_batch="32")
    assert (w.plan.micro_batch_size, w.plan.global_batch_size, w.plan.num_microbatches) == (4, 256, 8)


def test_fsdp_and_sharding_strategy_columns_shard(tmp_path, cfg):
    """torchtitan's FSDP degree (a shard group within the data-parallel ranks when smaller), NeMo's FSDP
    on/off, llm-foundry's sharding strategy and a ZeRO cell as tables write it; a stated zero_stage wins;
    an FSDP stack's row silent on it is fully sharded; "ZeRO 0" turns the distributed optimizer off too."""
    def stage(**cells):
        w = _workload(cfg, tmp_path, tp="1", **cells)
        return w.plan.zero_stage, w.plan.fsdp_shard_size, w.plan.distributed_optimizer

    assert stage(fsdp="64") == (3, 64, True) and stage(fsdp="8") == (3, 8, True)
    assert stage(fsdp="1")[0] == 3 and stage(fsdp="0")[0] == 0
    assert stage(sharding_strategy="FULL_SHARD")[0] == 3 and stage(sharding_strategy="SHARD_GRAD_OP")[0] == 2
    assert stage(sharding_strategy="HYBRID_SHARD") == (3, 8, True)
    assert stage(zero_stage="ZeRO-3", fsdp="0")[0] == 3 and stage(zero_stage="zero2")[0] == 2
    assert stage(framework="torchtitan")[0] == 3 and stage(framework="torchtitan", zero_stage="1")[0] == 1
    assert stage(zero_stage="0") == (0, 0, False)
    with pytest.raises(ConfigError, match=r"^row 1: sharding_strategy=ZERO_SHARD is not supported"):
        stage(sharding_strategy="ZERO_SHARD")


def test_a_dense_rows_ep_1_and_etp_1_and_torchtitans_selective(tmp_path, cfg):
    w = _workload(cfg, tmp_path, model="llama3_70b", tp="4", pp="4", ep="1", etp="1")
    assert (w.plan.ep, w.plan.tp) == (1, 4)
    w = _workload(cfg, tmp_path, framework="torchtitan", recompute="Selective")
    assert w.plan.recompute.value == "selective_op"  # torchtitan's selective_ac_option = "op"


def test_a_rows_gpu_brings_its_platform(tmp_path, cfg):
    """A GB200 row of a table validated on an H100 cluster runs in an NVL72 rack (4 GPUs a tray, a 72-GPU
    NVLink domain); a GPU of the chosen cluster keeps it; the row's own gpus_per_node still applies."""
    w = _workload(cfg, tmp_path, gpu="GB200 NVL72")
    assert (w.cluster.gpu.name, w.cluster.gpus_per_node, w.cluster.domain_size) == ("gb200", 4, 72)
    w = _workload(cfg, tmp_path, gpu="H100")
    assert (w.cluster.gpus_per_node, w.cluster.domain_size) == (8, 8)
    w = _workload(cfg, tmp_path, gpu="B200", gpus_per_node="4")
    assert (w.cluster.gpu.name, w.cluster.gpus_per_node) == ("b200", 4)


@pytest.mark.parametrize("delimiter", ["\t", ";", "|"])
def test_tab_semicolon_and_markdown_tables_are_read(tmp_path, delimiter):
    header, row = list(BASE), list(BASE.values())
    lines = [delimiter.join(header), delimiter.join(row)]
    if delimiter == "|":
        lines = [f"| {' | '.join(header)} |", "|" + "---|" * len(header), f"| {' | '.join(row)} |"]
    p = tmp_path / "t.csv"
    p.write_text("\n".join(lines) + "\n")
    (r,) = read_measurements(p)
    assert r.values["model"] == "llama3_8b" and r.values["step_time_s"] == "2.0"


def test_vp_without_a_schedule_runs_the_interleaved_schedule(tmp_path, cfg):
    w = _workload(cfg, tmp_path, model="llama3_70b", tp="4", pp="4", VP="5")
    assert (w.plan.schedule.value, w.plan.virtual_stages, w.plan.chunks) == ("interleaved", 5, 5)
    w = _workload(cfg, tmp_path, model="llama3_70b", tp="4", pp="4", VP="1")
    assert (w.plan.schedule.value, w.plan.chunks) == ("1f1b", 1)


def test_measured_memory_in_gb_is_converted_to_gib(tmp_path, cfg):
    p = _csv(tmp_path, [{**BASE, "Peak Memory (GB)": "64.4"}])
    (r,) = validate_rows(read_measurements(p), cfg, defaults=None)
    assert r.skipped_reason is None and r.measured_peak_memory_gib == pytest.approx(64.4e9 / 2**30)


# --- 3. model names

@pytest.mark.parametrize("raw,name", [
    ("gpt_1_7b", "gpt_1_7b"), ("gpt_3_6b", "gpt_3_6b"), ("gpt_18_4b", "gpt_18_4b"), ("gpt_145_6b", "gpt_145_6b"),
    ("DeepSeekV3", "deepseek_v3"), ("DeepSeek-V3", "deepseek_v3"), ("meta-llama/Llama-3.1-8B", "llama3_8b"),
    ("meta-llama/Meta-Llama-3-70B", "llama3_70b"), ("Llama-2-7b-hf", "llama2_7b"),
    ("Llama3.1-70B-Instruct", "llama3_70b"), ("Mixtral-8x7B-v0.1", "mixtral_8x7b"), ("GPT-3 175B", "gpt175b"),
    ("Llama4 Scout 17Bx16E", "llama4_scout"), ("GPT3 175B (Megatron)", "gpt175b"),
    ("Llama3 70B pretrain", "llama3_70b"),
    # NeMo's long-context rows: the context length after the model, the length itself in seq_len
    ("LLAMA3_8B_16k", "llama3_8b"), ("Llama3 70B 64K", "llama3_70b"), ("Llama 3.1 405B 16K", "llama3_1_405b"),
    ("foo_16k", "foo_16k"),
    ("DeepSeek-V2-Lite", "deepseek_v2_lite"), ("Qwen2-57B-A14B", "qwen2_57b_a14b"),
    # fine-tuning is not pretraining (LoRA freezes the base weights; SFT packs sequences): unknown, skipped
    ("Llama3 70B LoRA", "llama3_70b_lora"), ("Llama3 8B SFT", "llama3_8b_sft"),
])
def test_model_names_as_configs_and_hugging_face_ids_name_the_model_configs(raw, name):
    assert model_name(raw) == name


def test_a_row_naming_a_model_config_by_its_own_name_is_simulated(tmp_path, cfg):
    w = _workload(cfg, tmp_path, model="gpt_1_7b", seq_len="2048", global_batch="64", tp="1", num_gpus="8")
    assert (w.model.num_layers, w.model.hidden_size) == (24, 2304)


# --- 4. GPU names

@pytest.mark.parametrize("raw,name", [
    ("H100 80GB HBM3", "h100_sxm"), ("H200 SXM 141GB", "h200"), ("NVIDIA H100", "h100_sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100_80gb"), ("DGX H100", "h100_sxm"), ("A100 SXM 80GB", "a100_80gb"),
    ("B200 SXM 180GB", "b200"), ("A100-SXM4-40GB", "a100_40gb"), ("NVIDIA A100 40GB", "a100_40gb"),
    ("h100_96gb_500w", "h100_96gb_500w"), ("GB200-NVL72", "gb200"),
    ("H100 PCIe", "h100_pcie"),  # no gpu/ config for the PCIe part: unknown, not taken for the SXM one
    # a system naming its GPU among other words; two GPUs named, or none, stay unknown (skipped, not guessed)
    ("DGX H100 (8x H100 80GB)", "h100_sxm"), ("8x B200 (HGX)", "b200"), ("GB200-NVL72 (4 GPUs/node)", "gb200"),
    ("8xH100", "h100_sxm"), ("H100x8", "h100_sxm"), ("A100x8 80GB", "a100_80gb"),  # a count joined to the name
    ("H100 vs A100", "h100_vs_a100"), ("Eos", "h100_sxm"), ("Selene", "a100_80gb"), ("H100 NVL", "h100_nvl"),
    ("8x H100 NVL", "8x_h100_nvl"),
])
def test_gpu_names_as_tables_write_them(raw, name):
    assert gpu_key(raw) == name


def test_a_system_column_names_the_gpu_unless_a_gpu_column_does(tmp_path, cfg):
    base = {k: v for k, v in BASE.items() if k != "gpu"}
    (row,) = read_measurements(_csv(tmp_path, [{**base, "System": "DGX-B200"}]))
    w = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert w.cluster.gpu.name == "b200"
    (row,) = read_measurements(_csv(tmp_path, [{**BASE, "gpu": "H200", "System": "Eos"}], name="both.csv"))
    assert (row.get("gpu"), row.get("system")) == ("H200", "Eos")  # kept as given, echoed into validation.csv
    w = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert w.cluster.gpu.name == "h200"
    # a system naming no GPU it is known by runs on the cluster's GPU, as without the column (not skipped)
    (row,) = read_measurements(_csv(tmp_path, [{**base, "System": "Jean Zay"}], name="other.csv"))
    w = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert w.cluster.gpu.name == "h100_sxm"


def test_a_row_on_a_40gb_a100_is_simulated_on_that_part(tmp_path, cfg):
    w = _workload(cfg, tmp_path, gpu="NVIDIA A100-SXM4-40GB", model="gpt_1_7b", seq_len="2048", tp="1",
                  num_gpus="8", global_batch="64")
    assert w.cluster.gpu.name == "a100_40gb"


# --- 5. precisions and frameworks

@pytest.mark.parametrize("raw,precision", [
    ("FP8 (delayed)", "fp8"), ("FP8 (Delayed Scaling)", "fp8"), ("FP8 current scaling", "fp8"), ("fp8-cs", "fp8"),
    ("amp_bf16", "bf16"), ("amp_fp8", "fp8"), ("BF16 (AMP)", "bf16"), ("float8 (rowwise)", "fp8_rowwise"),
    ("torchao float8", "fp8"), ("16-mixed", "fp16"), ("bf16-true", "bf16"),  # Lightning's precision flags
])
def test_precision_spellings(tmp_path, cfg, raw, precision):
    assert _workload(cfg, tmp_path, precision=raw).plan.precision.value == precision


@pytest.mark.parametrize("raw,value", [
    ("mxfp8_cublas", "mxfp8"), ("mxfp8_cublas_rceil", "mxfp8"), ("MXFP8 (E4M3)", "mxfp8"), ("NVFP4 (E2M1)", "nvfp4"),
    ("FP8 subchannel", "fp8_blockwise"), ("FP8-SC", "fp8_blockwise"),
    # Megatron-Bridge's mixed-precision recipe names
    ("bf16_with_fp8_current_scaling_mixed", "fp8"), ("bf16_with_fp8_delayed_scaling_mixed", "fp8"),
    ("bf16_with_mxfp8_mixed", "mxfp8"), ("bf16_with_fp8_subchannel_scaling_mixed", "fp8_blockwise"),
    ("bf16_with_nvfp4_mixed", "nvfp4"),
])
def test_torchao_and_block_scaled_recipe_names(tmp_path, cfg, raw, value):
    w = _workload(cfg, tmp_path, precision=raw, gpu="B200")  # MX and NVFP4 need a Blackwell GPU
    assert w.plan.precision.value == value


@pytest.mark.parametrize("raw", ["op", "selective (per-op SAC)", "Selective per-op"])
def test_torchtitans_per_op_checkpointing_spellings(tmp_path, cfg, raw):
    assert _workload(cfg, tmp_path, recompute=raw).plan.recompute.value == "selective_op"


@pytest.mark.parametrize("raw,stack", [
    ("NeMo 24.09", "megatron_core_te"), ("Megatron-Bridge 0.2", "megatron_core_te"), ("DeepSpeed 0.19.2", "deepspeed"),
    ("MosaicML llm-foundry", "llm_foundry_fsdp"), ("torchtitan (torch.compile)", "torchtitan_fsdp2_compile"),
    ("Megatron-DeepSpeed", "megatron_deepspeed_2022"),
])
def test_framework_names_with_a_version_or_vendor(tmp_path, cfg, raw, stack):
    assert _workload(cfg, tmp_path, framework=raw).stack.name == stack


# --- 6. numbers, placeholders and booleans

@pytest.mark.parametrize("column,raw,value", [
    ("tokens_per_s_per_gpu", "14,123.5", 14123.5), ("num_gpus", "1,024", 1024.0), ("seq_len", "8K", 8192.0),
    ("seq_len", "128k", 131072.0), ("global_batch", "8K", 8000.0), ("tokens_per_s", "14.1K", 14100.0),
    ("iteration_time_ms", "1200 ms", 1200.0), ("iteration_time_ms", "1.2 s", 1200.0),
    ("step_time_s", "1200 ms", 1.2), ("peak_memory_gib", "80 GB", 80e9 / 2**30), ("tp", "1e1", 10.0),
])
def test_numbers_as_tables_write_them(column, raw, value):
    assert cell_number(column, raw) == pytest.approx(value)


@pytest.mark.parametrize("column,raw", [("iteration_time_ms", "1.2 GB"), ("tp", "8 ms"), ("tp", "1,5")])
def test_a_unit_of_another_quantity_is_no_number(column, raw):
    with pytest.raises(ValueError):
        cell_number(column, raw)


def test_a_row_with_grouped_thousands_k_and_units_is_read(tmp_path, cfg):
    p = _csv(tmp_path, [{**BASE, "seq_len": "8K", "num_gpus": "64", "step_time_s": "", "iteration_time_ms": "2,000 ms"},
                        {**BASE, "seq_len": "8K", "step_time_s": "-", "iteration_time_ms": "N/A",
                         "tokens_per_s_per_gpu": "8,192"}])
    ms, tps = validate_rows(read_measurements(p), cfg, defaults=None)
    assert ms.skipped_reason is None and ms.measured_ms == pytest.approx(2000.0)
    assert tps.skipped_reason is None and tps.quantity == "tokens_per_s_per_gpu"
    assert tps.measured_ms == pytest.approx(128 * 8192 / (8192 * 64) * 1e3)


@pytest.mark.parametrize("cell", ["-", "N/A", "n/a", "\u2014"])
def test_placeholder_cells_are_empty(tmp_path, cfg, cell):
    w = _workload(cfg, tmp_path, cp=cell, precision=cell, sequence_parallel=cell)
    assert (w.plan.cp, w.plan.precision.value, w.plan.sequence_parallel) == (1, "bf16", True)  # the H100 defaults


@pytest.mark.parametrize("cell,value", [("\u2713", True), ("on", True), ("enabled", True), ("yes", True),
                                        ("\u2717", False), ("off", False), ("disabled", False), ("no", False)])
def test_boolean_cells(tmp_path, cfg, cell, value):
    w = _workload(cfg, tmp_path, sequence_parallel=cell, framework="torchtitan", torch_compile=cell)
    assert w.plan.sequence_parallel is value
    assert w.stack.name == ("torchtitan_fsdp2_compile" if value else "torchtitan_fsdp2")


@pytest.mark.parametrize("cell,mode", [("\u2713", "full"), ("yes", "full"), ("off", "none"),
                                       ("selective", "selective")])
def test_activation_checkpointing_column_is_the_recompute_mode(tmp_path, cfg, cell, mode):
    assert _workload(cfg, tmp_path, **{"Activation checkpointing": cell}).plan.recompute.value == mode


# --- 7. cells beyond the header

def test_cells_beyond_the_header_are_warned_about_once(tmp_path, caplog):
    p = tmp_path / "rows.csv"
    head = ",".join(BASE)
    row = ",".join(BASE.values())
    p.write_text(f"{head}\n{row},extra\n{row}\n{row},more,cells\n")
    with caplog.at_level(logging.WARNING, logger="vtrain.validation.csv_io"):
        rows = read_measurements(p)
    assert len(rows) == 3 and "extra" not in rows[0].values.values()
    (record,) = caplog.records
    assert record.getMessage() == (f"validate.data={p}: 2 row(s) (row 1 first) have more cells than the header's "
                                   "9 columns; the cells beyond them are ignored")


# --- end to end: a NeMo performance-summary table

def test_a_nemo_style_table_validates_end_to_end(tmp_path, capfd):
    from tests.clirun import validate_table

    res, rows = validate_table('Model,GPU,#-GPUs,GBS,MBS,Sequence Length,TP,PP,CP,VP,Tokens / sec / GPU,'
                               'Model TFLOP / sec / GPU,"Est. time to train in days (10T tokens, 1K GPUs)"\n'
                               'LLAMA3-8B,H100 80GB HBM3,8,128,1,8K,1,1,2,-,"13,812",800,11\n', tmp_path, capfd)
    assert res.code == 0, res.err
    assert "Traceback" not in res.err and "skipped row" not in res.out
    assert "| n=1 | skipped=0" in res.out
    (row,) = rows
    assert row["skipped_reason"] == "" and row["measured_quantity"] == "tokens_per_s_per_gpu"
    assert float(row["measured_ms"]) == pytest.approx(128 * 8192 / (13812 * 8) * 1e3, rel=1e-4)
    assert row["simulated_stack"] == "megatron_core_te"
    # MAPE's error is of tokens/s, the inverse of the time's; the table prints both
    measured, predicted = float(row["measured_ms"]), float(row["predicted_ms"])
    assert float(row["ape_pct"]) == pytest.approx(abs(measured / predicted - 1) * 100, abs=1e-3)
    assert float(row["error_pct"]) == pytest.approx((predicted / measured - 1) * 100, abs=1e-3)
    assert f"MAPE: {float(row['ape_pct']):.2f}%" in res.out


def test_gradient_and_moment_dtypes_as_megatron_names_them(tmp_path, cfg):
    """A Hopper row silent on it reduces bf16 gradients (NVIDIA's recipes: grad_reduce_in_fp32=False); a
    grad_reduce_in_fp32 / accumulate_allreduce_grads_in_fp32 cell says otherwise; exp_avg_dtype sets the moments."""
    assert normalise_header("grad_reduce_in_fp32") == "fp32_grads"
    assert normalise_header("exp_avg_dtype") == "optimizer_moments"
    assert _workload(cfg, tmp_path).plan.fp32_grads is False
    assert _workload(cfg, tmp_path, grad_reduce_in_fp32="true").plan.fp32_grads is True
    assert _workload(cfg, tmp_path, accumulate_allreduce_grads_in_fp32="True").plan.fp32_grads is True
    assert _workload(cfg, tmp_path, tp="1", framework="torchtitan").plan.fp32_grads is True  # FSDP2's fp32 reduce
    w = _workload(cfg, tmp_path, exp_avg_dtype="bf16")
    assert (w.plan.optimizer_moments, w.plan.grad_bytes) == ("bf16", 2.0)


def test_llm_foundry_mpt_rows_and_their_mp_mode(tmp_path, cfg):
    """llm-foundry's table names MPT sizes and Composer's FSDP mixed-precision mode: PURE reduces bf16
    gradients, DEFAULT fp32; another mode is the row's one-line skip reason."""
    assert normalise_header("MP Mode") == "mp_mode"
    w = _workload(cfg, tmp_path, model="MPT-30B", tp="1", mp_mode="PURE", sharding_strategy="FULL_SHARD")
    assert (w.model.name, w.model.hidden_size, w.plan.zero_stage, w.plan.fp32_grads) == ("mpt_30b", 7168, 3, False)
    assert _workload(cfg, tmp_path, model="mpt-7b", tp="1", mp_mode="DEFAULT").plan.fp32_grads is True
    with pytest.raises(ConfigError, match=r"^row 1: mp_mode=HALF is not supported"):
        _workload(cfg, tmp_path, model="mpt-7b", tp="1", mp_mode="HALF")


# --- defaults by the stack a row states

FOUNDRY = {"Model": "7b", "SeqLen (T)": "2048", "# GPUs": "8", "GPU": "a100_80gb", "MicroBatchSize": "6",
           "GradAccum": "1", "GlobalBatchSize": "48", "Throughput (T/s/GPU)": "3000", "Precision": "amp_bf16",
           "MP Mode": "DEFAULT", "Sharding Strategy": "FULL_SHARD", "Activation Checkpointing": "False"}


def _row(tmp_path, values):
    (row,) = read_measurements(_csv(tmp_path, [values]))
    return row


def test_a_model_named_by_size_alone_is_llm_foundrys_mpt_shape_with_its_defaults(tmp_path, cfg):
    """llm-foundry's benchmark table names its models "7b", "760m": its MPT shapes, run as llm-foundry runs
    them on whatever GPU (flash attention, bf16, no recompute), not as vTrain's fp16 A100 runs."""
    w = row_workload(_row(tmp_path, FOUNDRY), cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert w.model.name == "mpt_7b" and w.stack.name == "llm_foundry_fsdp"
    assert w.plan.flash_attention and w.plan.precision.value == "bf16" and w.plan.recompute.value == "none"
    assert w.plan.sharding_stage == 3 and w.cluster.gpu.name == "a100_80gb"
    with pytest.raises(ConfigError, match="model='7b' names no model/ config"):
        row_workload(_row(tmp_path, {**FOUNDRY, "framework": "NeMo"}), cfg.cluster, load_gpu_config,
                     load_stack_config, defaults=None)


@pytest.mark.parametrize("framework,stack,flash,precision", [
    ("", "megatron_deepspeed_2022", False, "fp16"),  # vTrain's A100 runs: the GPU's era
    ("torchtitan", "torchtitan_fsdp2", True, "bf16"), ("NeMo", "megatron_core_te", True, "bf16"),
])
def test_an_a100_row_takes_the_defaults_of_the_stack_it_names(tmp_path, cfg, framework, stack, flash, precision):
    values = {**BASE, "gpu": "A100 80GB", "framework": framework}
    w = row_workload(_row(tmp_path, values), cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert (w.stack.name, w.plan.flash_attention, w.plan.precision.value) == (stack, flash, precision)
    assert w.plan.sequence_parallel == (stack != "megatron_deepspeed_2022")  # torchtitan: TP is always SP


def test_a_table_without_a_global_batch_gives_it_by_its_gradient_accumulation(tmp_path, cfg):
    values = {k: v for k, v in BASE.items() if k not in ("global_batch", "micro_batch")}
    p = _csv(tmp_path, [{**values, "MBS": "2", "GA": "4"}], "ga.csv")
    (row,) = read_measurements(p)
    w = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert (w.plan.micro_batch_size, w.plan.dp, w.plan.global_batch_size) == (2, 32, 2 * 4 * 32)
    stated = _workload(cfg, tmp_path, GradAccum="4")  # a stated global batch wins
    assert stated.plan.global_batch_size == 128
    with pytest.raises(ConfigError, match="row 1: grad_accum=0: must be an integer >= 1"):
        row_workload(read_measurements(_csv(tmp_path, [{**values, "MBS": "1", "GA": "0"}], "ga0.csv"))[0], cfg.cluster,
                     load_gpu_config, load_stack_config, defaults=None)


@pytest.mark.parametrize("header,cell,dispatcher", [
    ("Dispatcher", "A2A", "alltoall"), ("Dispatcher", "DeepEP", "deepep"), ("moe_token_dispatcher_type", "alltoall",
                                                                            "alltoall"),
    ("moe_flex_dispatcher_backend", "hybridep", "hybridep"),
    ("moe_flex_dispatcher_backend", "deepep", "deepep"), ("Token Dispatcher", "All-to-All", "alltoall"),
])
def test_moe_dispatchers_as_megatron_and_its_tables_name_them(tmp_path, cfg, header, cell, dispatcher):
    values = {**BASE, "model": "qwen3_30b_a3b", "tp": "1", "ep": "8", header: cell}
    w = row_workload(_row(tmp_path, values), cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert w.plan.moe_dispatcher.value == dispatcher


def test_megatron_and_torchtitan_argument_names_as_headers(tmp_path, cfg):
    values = {**{k: v for k, v in BASE.items() if k not in ("tp", "pp")}, "model": "qwen3_30b_a3b",
              "tensor_parallel_degree": "1", "pipeline_parallel_degree": "2", "expert_parallel_degree": "8",
              "moe_a2a_overlap": "true", "recompute_granularity": "selective", "use_distributed_optimizer": "true",
              "decoder_last_pipeline_num_layers": "20", "moe_router_topk": "4", "schedule": "interleaved",
              "virtual_stages": "2"}
    w = row_workload(_row(tmp_path, values), cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert (w.plan.tp, w.plan.pp, w.plan.ep, w.plan.dp) == (1, 2, 8, 32)
    assert w.plan.overlap_moe_comm and w.plan.recompute.value == "selective" and w.plan.distributed_optimizer
    assert w.plan.last_stage_layers == 20 and w.model.moe_top_k == 4


def test_an_mfu_column_is_a_measurement_of_the_bf16_peak_by_megatrons_count(tmp_path, cfg):
    from vtrain.validation.megatron_flops import megatron_flops_per_iteration

    values = {k: v for k, v in BASE.items() if k != "step_time_s"}
    rows = [{**values, "MFU (%)": "45%"}, {**values, "MFU (%)": "45"}, {**values, "MFU (%)": "0.45"},
            {**values, "MFU (%)": "450"}, {**values, "MFU (%)": "45", "Tokens/sec/GPU": "1000"}]
    results = validate_rows(read_measurements(_csv(tmp_path, rows, "mfu.csv")), cfg, defaults=None)
    w = _workload(cfg, tmp_path)
    flops = megatron_flops_per_iteration(w.model, 128, 8192, 2)
    expected_ms = flops / (0.45 * 989.0e12 * 64) * 1e3  # H100 SXM: 989 TFLOP/s dense bf16
    assert [r.quantity for r in results[:3]] == ["mfu"] * 3
    assert all(r.measured_ms == pytest.approx(expected_ms, rel=1e-3) for r in results[:3])
    assert results[3].skipped_reason == "row 4: mfu=450 is above 200% of the bf16 peak"
    assert results[4].quantity == "tokens_per_s_per_gpu"  # a throughput, where given, is the measurement


NEMO_STYLE = """\
| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| LLAMA3_8B | 8 | 128 | 1 | 8192 | 0 | 1 | 1 | 2 | n/a | 1 | 32 | 10000 |
| LLAMA3_8B_16k | 8 | 64 | 1 | 16384 | 0 | 2 | 1 | 2 | n/a | 1 | 32 | 9000 |
| LLAMA3_70B | 64 | 128 | 1 | 8192 | 0 | 4 | 4 | 2 | 5 | 1 | 64 | 1000 |
| Mixtral_8x7B | 64 | 256 | 1 | 4096 | 0 | 1 | 4 | 1 | 8 | 8 | 32 | 8000 |
| DeepSeekV3 | 1024 | 8192 | 1 | 4096 | 0 | 2 | 16 | 1 | 1 | 64 | 128 | 1000 |
| Qwen3_235B_a22b | 256 | 2048 | 1 | 4096 | 0 | 2 | 8 | 1 | 4 | 32 | 128 | 1000 |
| Qwen3_30B_a3B | 8 | 512 | 2 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 32 | 10000 |
"""


def test_a_nemo_style_table_of_dense_and_moe_recipes_simulates_every_row(tmp_path, cfg):
    """The layout of NeMo's performance summaries (synthetic throughputs): long-context model names, GA beside
    GBS, MoE recipes whose EP is only valid at ETP 1 (TP 2 x EP 64 over 32 DP ranks). No row is skipped."""
    p = tmp_path / "nemo.md"
    p.write_text(NEMO_STYLE)
    results = validate_rows(read_measurements(p), cfg, defaults=None)
    assert [r.skipped_reason for r in results] == [None] * 7
    assert all(r.predicted_ms is not None and r.predicted_ms > 0 for r in results)


def test_validate_stack_gives_a_row_without_a_stack_column_that_stacks_defaults(tmp_path, cfg):
    row = _row(tmp_path, {**BASE, "gpu": "A100 80GB"})
    era = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    titan = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None, stack="torchtitan_fsdp2")
    assert (era.stack.name, era.plan.flash_attention) == ("megatron_deepspeed_2022", False)
    assert (titan.stack.name, titan.plan.flash_attention, titan.plan.sharding_stage) == ("torchtitan_fsdp2", True, 3)


@pytest.mark.parametrize("raw,mode", [("Full (uniform)", "full"), ("Selective (core_attn, moe_act)", "selective"),
                                      ("selective_op", "selective_op"), ("SAC", "selective_op")])
def test_a_recompute_mode_with_its_details_is_the_mode(tmp_path, cfg, raw, mode):
    assert _workload(cfg, tmp_path, recompute=raw).plan.recompute.value == mode


def test_an_unknown_recompute_mode_is_still_a_skip_reason(tmp_path, cfg):
    with pytest.raises(ConfigError, match="recompute=partial is not supported"):
        _workload(cfg, tmp_path, recompute="partial")


# --- review fixes: MFU edge cases, GA with a local batch, uniform recompute, the flex backend, torchtitan's -1s

def test_mfu_edge_cases_are_one_line_reasons_and_a_tflops_column_wins(tmp_path, cfg):
    values = {k: v for k, v in BASE.items() if k != "step_time_s"}
    rows = [{**values, "TFLOPs/GPU": "400", "MFU": "abc"}, {**values, "MFU": "%"},
            {**values, "gpu": "V100", "model": "gpt_1_7b", "tp": "1", "MFU": "40%"}]
    results = validate_rows(read_measurements(_csv(tmp_path, rows, "mfu2.csv")), cfg, defaults=None)
    assert results[0].skipped_reason is None and results[0].quantity == "model_tflops_per_gpu"
    assert results[1].skipped_reason == "row 2: mfu=% is not a number"
    assert results[2].skipped_reason is None or "peak" in results[2].skipped_reason  # never a traceback


def test_a_torchtitan_mfu_is_converted_by_torchtitans_own_flop_count(tmp_path, cfg):
    from vtrain.validation.run import reported_flops

    values = {**{k: v for k, v in BASE.items() if k != "step_time_s"}, "tp": "1", "framework": "torchtitan",
              "MFU": "40"}
    w = row_workload(_row(tmp_path, values), cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    m = w.model
    per_token = 6 * m.active_params(embedding=False) + 12 * m.num_layers * m.num_heads * m.head_dim * 8192
    assert reported_flops(w) == pytest.approx(per_token * 128 * 8192)


def test_gradient_accumulation_multiplies_a_local_batch_too(tmp_path, cfg):
    values = {k: v for k, v in BASE.items() if k not in ("global_batch", "micro_batch")}
    row = _row(tmp_path, {**values, "tp": "1", "framework": "torchtitan", "Local batch size": "2", "GA": "4"})
    w = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert (w.plan.micro_batch_size, w.plan.dp, w.plan.global_batch_size) == (2, 64, 2 * 4 * 64)


def test_torchtitans_minus_one_defaults_are_derived_not_skipped(tmp_path, cfg):
    values = {k: v for k, v in BASE.items() if k not in ("global_batch", "micro_batch")}
    row = _row(tmp_path, {**values, "tp": "1", "framework": "torchtitan", "Local batch size": "2",
                          "global_batch_size": "-1", "data_parallel_shard_degree": "-1"})
    w = row_workload(row, cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert (w.plan.global_batch_size, w.plan.sharding_stage, w.plan.fsdp_shard_size) == (2 * 64, 3, 0)


def test_full_uniform_with_a_layer_count_recomputes_every_layer(tmp_path, cfg):
    values = {**BASE, "model": "llama3_70b", "tp": "4", "pp": "4", "recompute_num_layers": "1"}
    uniform = row_workload(_row(tmp_path, {**values, "recompute": "Full (uniform)"}), cfg.cluster, load_gpu_config,
                           load_stack_config, defaults=None)
    block = row_workload(_row(tmp_path, {**values, "recompute": "full"}), cfg.cluster, load_gpu_config,
                         load_stack_config, defaults=None)
    assert uniform.plan.recompute_num_layers == 0 and block.plan.recompute_num_layers == 1
    assert enum_key(Recompute, "Selective op (SAC)") == "selective_op" and enum_key(Recompute, "None (off)") == "none"


def test_a_flex_dispatcher_with_its_backend_column_is_one_row(tmp_path, cfg):
    values = {**BASE, "model": "qwen3_30b_a3b", "tp": "1", "ep": "8", "moe_token_dispatcher_type": "flex",
              "moe_flex_dispatcher_backend": "hybridep"}
    w = row_workload(_row(tmp_path, values), cfg.cluster, load_gpu_config, load_stack_config, defaults=None)
    assert w.plan.moe_dispatcher.value == "hybridep"
    a2a = row_workload(_row(tmp_path, {**values, "moe_token_dispatcher_type": "alltoall"}), cfg.cluster,
                       load_gpu_config, load_stack_config, defaults=None)
    assert a2a.plan.moe_dispatcher.value == "alltoall"


# Published-style layouts of today's dense and MoE models (NeMo performance-summary columns, a Markdown table):
# every row is simulated (none skipped for a feature vtrain lacks) and fits its GPU, as a run that ran must.
# The throughputs are placeholders: the test asserts what is simulated, not how close it comes.
LAYOUTS = """| Model | #-GPUs | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP | Tokens / sec / GPU |
|---|---|---|---|---|---|---|---|---|---|---|
| LLAMA3_8B | 8 | 128 | 1 | 8192 | 1 | 1 | 2 | 1 | 1 | 10000 |
| LLAMA3_70B | 64 | 128 | 1 | 8192 | 4 | 8 | 1 | 5 | 1 | 1500 |
| LLAMA3_405B | 576 | 252 | 1 | 8192 | 8 | 9 | 2 | 7 | 1 | 150 |
| Nemotron-4 340B | 128 | 32 | 1 | 4096 | 8 | 8 | 1 | 12 | 1 | 200 |
| GPT3 175B | 512 | 2048 | 2 | 2048 | 4 | 8 | 1 | 6 | 1 | 700 |
| Mixtral 8x7B | 64 | 256 | 1 | 4096 | 1 | 4 | 1 | 8 | 8 | 5000 |
| Mixtral 8x22B | 256 | 256 | 1 | 65536 | 2 | 4 | 8 | 14 | 8 | 500 |
| Qwen3 30B-A3B | 16 | 512 | 2 | 4096 | 1 | 1 | 1 | 1 | 16 | 10000 |
| Qwen3 235B-A22B | 256 | 2048 | 1 | 4096 | 2 | 8 | 1 | 4 | 32 | 1000 |
| DeepSeek V3 | 1024 | 8192 | 1 | 4096 | 1 | 16 | 1 | 1 | 64 | 1500 |
| GPT-OSS 120B | 64 | 1280 | 4 | 4096 | 1 | 1 | 1 | 1 | 64 | 8000 |
"""


@pytest.mark.parametrize("gpu, precision", [("H100", "FP8"), ("GB200", "BF16")])
def test_published_layouts_of_todays_models_all_simulate_and_fit(tmp_path, capfd, gpu, precision):
    from tests.clirun import validate_table

    lines = LAYOUTS.strip().splitlines()
    table = "\n".join([f"| GPU | Precision {lines[0]}", f"|---|---{lines[1]}",
                       *(f"| {gpu} | {precision} {line}" for line in lines[2:])]) + "\n"
    res, rows = validate_table(table, tmp_path, capfd)
    assert res.code == 0, res.err
    assert len(rows) == 11 and "| n=11 | skipped=0" in res.out, res.out
    assert all(r["fits"] == "True" for r in rows), [(r["model"], r["predicted_peak_memory_gib"]) for r in rows]
    assert {r["simulated_stack"] for r in rows} == {"megatron_core_te"}
