"""The published runs as pasted (vtrain/data/published_runs): the framework, precision, GPU, data-parallel mode and
model-variant spellings of compiled tables are read; every row simulates except hybrid Mamba (and the rows that wait
on pipeline layouts not yet modelled, each with its reason); task=validate prints and writes the error per source."""
import csv
import json

import pytest

from tests.clirun import validate_table
from vtrain import compose
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import MeasuredRow, normalise_header, read_measurements
from vtrain.validation.datasets import resolve_dataset, shipped_defaults
from vtrain.validation.published import pasted_row, summary_by_source
from vtrain.validation.run import validate_rows
from vtrain.validation.spellings import (
    framework_cell,
    gpu_cell,
    model_variant_cells,
    precision_cells,
    sharding_cells,
)


@pytest.mark.parametrize("raw,name,release", [
    ("Megatron-Bridge / Megatron-Core (NeMo 26.02.01)", "Megatron-Bridge", "26.02.01"),
    ("Megatron-Bridge / Megatron-Core (NeMo 25.09)", "Megatron-Bridge", "25.09"),
    ("NeMo 24.07 (Megatron-Core)", "NeMo", "24.07"),
    ("NeMo 24.05 (Megatron-Core)", "NeMo", "24.05"),
    ("Composer + llm-foundry (FSDP, FlashAttention)", "Composer", ""),
    ("NeMo 24.09", "NeMo 24.09", "24.09"),  # a whole name with its release: as it is, and the release
    ("DeepSpeed ZeRO-3", "deepspeed", ""),  # a framework followed by its settings: its leading words
    ("torchtitan float8 async TP", "torchtitan", ""),
])
def test_framework_names_with_their_parts_and_release(raw, name, release):
    assert framework_cell(raw) == (name, release)


@pytest.mark.parametrize("raw", ["Megatron-LM (2020)", "Megatron-DeepSpeed", "DeepSpeed", "llm-foundry",
                                 "Megatron-Bridge", "torchtitan"])
def test_framework_names_the_row_builder_reads_as_they_are(raw):
    assert framework_cell(raw) is None


@pytest.mark.parametrize("raw,stack", [
    ("Megatron-Bridge", "megatron_core_te"), ("NeMo 24.07", "megatron_core_te"),
    ("NeMo 24.07 (Megatron-Core)", "megatron_core_te"), ("Megatron-Bridge / Megatron-Core (NeMo 26.02.01)",
                                                         "megatron_core_te"),
    ("llm-foundry", "llm_foundry_fsdp"), ("Composer + llm-foundry (FSDP, FlashAttention)", "llm_foundry_fsdp"),
    ("Megatron-DeepSpeed", "megatron_deepspeed_2022"), ("DeepSpeed", "deepspeed"), ("DeepSpeed ZeRO-3", "deepspeed"),
])
def test_framework_names_as_tables_print_them_name_their_stack(raw, stack):
    from vtrain.validation.rows import RowDefaults, stack_name

    row, _ = pasted_row(_row(framework=raw))
    assert stack_name(row, None, RowDefaults()) == stack


def test_megatron_lm_2020_is_the_pre_fp8_megatron_on_v100_and_a100():
    from vtrain.validation.rows import RowDefaults, stack_name

    row, _ = pasted_row(_row(framework="Megatron-LM (2020)"))
    assert stack_name(row, None, RowDefaults(), pre_fp8=True) == "megatron_lm_2021"


@pytest.mark.parametrize("raw,cells", [
    ("fp16 mixed precision", {"precision": "fp16"}),
    ("bf16 (MP mode PURE)", {"precision": "bf16", "mp_mode": "PURE"}),
    ("FP8 (per-tensor; recipe not stated)", {"precision": "fp8"}),
    ("FP8 blockwise (128x128 w / 1x128 act)", {"precision": "fp8_blockwise"}),
    ("BF16 mixed precision (AMP)", {"precision": "bf16"}),
])
def test_precisions_with_remarks(raw, cells):
    assert precision_cells(raw) == cells


@pytest.mark.parametrize("raw", ["FP8-CS", "FP8-MX", "MXFP8", "NVFP4", "amp_bf16", "BF16", "FP8", "fp8_delayed"])
def test_precisions_read_as_they_are(raw):
    assert precision_cells(raw) is None  # the row builder's enum spellings read them (rows.enum_key)


@pytest.mark.parametrize("raw,gpu", [
    ("A100 (DGX-A100, 2020; 40GB assumed)", "a100_40gb"),  # the remark's memory size picks the part
    ("V100-SXM3-32GB (DGX-2)", "v100"),
    ("H100-SXM5-80GB (DGX H100)", "h100_sxm"),
    ("GB200 (NVL72)", "gb200"),
    ("GB300 (NVL72)", "gb300"),
    ("B300 (DGX B300)", "b300"),
])
def test_gpu_names_with_a_remark(raw, gpu):
    assert gpu_cell(raw) == gpu


@pytest.mark.parametrize("raw,cells", [
    ("DDP (FSDP=0; distributed-optimizer use not stated)", {}),
    ("PyTorch FSDP FULL_SHARD", {"sharding_strategy": "FULL_SHARD"}),
    ("Megatron FSDP (FSDP=64)", {"fsdp": "64"}),
    ("Megatron FSDP (FSDP=8)", {"fsdp": "8"}),
    ("ZeRO-3", {"zero_stage": "3"}),
    ("FSDP (SHARD_GRAD_OP)", {"sharding_strategy": "SHARD_GRAD_OP"}),
])
def test_data_parallel_modes(raw, cells):
    assert sharding_cells(raw) == cells


def test_an_unknown_data_parallel_mode_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"^zero_or_fsdp=pipedream: names no data-parallel mode"):
        sharding_cells("pipedream")


@pytest.mark.parametrize("raw,cells", [
    ("DeepSeekV3 (w/o MTP)", {"mtp_layers": "0"}), ("DeepSeekV3 (w/ MTP)", {"mtp_layers": "1"}),
    ("Qwen3_30B_a3B (tokendrop)", {"capacity_factor": "1.0"}), ("DeepSeekV3 (dropless)", {"capacity_factor": "none"}),
    ("LLAMA3_70B", {}), ("Llama3 8B (16k)", {}),
])
def test_model_variants(raw, cells):
    assert model_variant_cells(raw) == cells


@pytest.mark.parametrize("header,column", [
    ("layers", "num_layers"), ("hidden", "hidden_size"), ("heads", "num_heads"), ("kv_heads", "num_kv_heads"),
    ("ffn_hidden", "ffn_hidden_size"), ("vocab", "vocab_size"), ("global_batch_seqs", "global_batch"),
    ("iter_time_s", "iteration_time_s"), ("gpu_type", "gpu"), ("vp", "virtual_stages"),
])
def test_compiled_table_headers(header, column):
    assert normalise_header(header) == column


@pytest.fixture(scope="module")
def cfg():
    return compose(["+cluster=h100x1024"], require=False)


def _csv_of(rows, path):
    """``rows`` (MeasuredRows of one file) written back as a CSV at ``path``."""
    header = list(rows[0].values)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows([[r.values.get(k, "") for k in header] for r in rows])
    return path


def _row(**cells):
    return MeasuredRow(7, {k: str(v) for k, v in cells.items()})


def test_pasted_row_rewrites_only_what_it_reads():
    row, notes = pasted_row(_row(framework="NeMo 24.07 (Megatron-Core)", precision="bf16 (MP mode PURE)",
                                 gpu="A100 (DGX-A100, 2020; 40GB assumed)", zero_or_fsdp="Megatron FSDP (FSDP=64)",
                                 mp_size=4, model="DeepSeekV3 (w/o MTP)", seq_len=4096, metric="tokens_per_s_per_gpu",
                                 value="1234"))
    assert row.values["framework"] == "NeMo" and row.values["framework_release"] == "24.07"
    assert (row.values["precision"], row.values["mp_mode"], row.values["gpu"]) == ("bf16", "PURE", "a100_40gb")
    assert (row.values["fsdp"], row.values["tp"], row.values["mtp_layers"]) == ("64", "4", "0")
    assert row.values["tokens_per_s_per_gpu"] == "1234" and row.values["seq_len"] == "4096" and notes == []
    same, _ = pasted_row(_row(framework="megatron_core_te", precision="bf16", gpu="h100_sxm", tp=2))
    assert same.values == {"framework": "megatron_core_te", "precision": "bf16", "gpu": "h100_sxm", "tp": "2"}


def test_a_zero_stage_named_with_the_framework():
    row, _ = pasted_row(_row(framework="DeepSpeed ZeRO-3"))
    assert (row.values["framework"], row.values["zero_stage"]) == ("deepspeed", "3")
    stated, _ = pasted_row(_row(framework="DeepSpeed ZeRO-3", zero_stage="1"))
    assert stated.values["zero_stage"] == "1"


def test_tp_comm_overlap_at_tp_1_is_ignored_with_a_note():
    row, notes = pasted_row(_row(tp=1, tp_comm_overlap="true"))
    assert "tp_comm_overlap" not in row.values
    assert notes == ["tp_comm_overlap ignored at tp=1 (the framework turns it off: no TP collectives)"]
    kept, none = pasted_row(_row(tp=2, tp_comm_overlap="true"))
    assert kept.values["tp_comm_overlap"] == "true" and none == []
    off, why = pasted_row(_row(tp=4, sequence_parallel="no", tp_comm_overlap="yes"))
    assert "tp_comm_overlap" not in off.values
    assert why == ["tp_comm_overlap ignored with sequence_parallel=no (the framework turns it off)"]


def test_tp_comm_overlap_at_tp_1_simulates_as_the_framework_runs_it(cfg):
    row = _row(model="llama3_8b", gpu="H100", num_gpus=8, tp=1, pp=1, global_batch=128, micro_batch=1,
               seq_len=8192, precision="FP8-CS", framework="Megatron-Bridge", tp_comm_overlap="true",
               tokens_per_s_per_gpu=14000)
    (res,) = validate_rows([row], cfg, defaults=None)
    assert res.skipped_reason is None and res.notes.startswith("tp_comm_overlap ignored at tp=1")
    plain = _row(model="llama3_8b", gpu="H100", num_gpus=8, tp=1, pp=1, global_batch=128, micro_batch=1,
                 seq_len=8192, precision="FP8-CS", framework="Megatron-Bridge", tokens_per_s_per_gpu=14000)
    (without,) = validate_rows([plain], cfg, defaults=None)
    assert res.predicted_ms == without.predicted_ms  # as the framework runs it: the same step as without the flag


def test_hybrid_mamba_is_a_skip_with_its_reason():
    with pytest.raises(ConfigError, match=r"^row 7: arch_type=hybrid-mamba-moe: hybrid Mamba"):
        pasted_row(_row(arch_type="hybrid-mamba-moe"))
    assert pasted_row(_row(arch_type="moe"))[0].values == {"arch_type": "moe"}


def test_the_shipped_set_is_registered_with_each_rows_own_stack():
    rows = read_measurements(resolve_dataset("published_runs"))
    assert len(rows) == 247 and shipped_defaults("published_runs") is None
    assert {r.get("source_key") for r in rows} == {
        "megatron_readme_sep2020", "nemo_24.07", "nemo_launcher_24.05", "megatron_bridge_25.09",
        "megatron_bridge_25.11", "megatron_bridge_26.02", "megatron_bridge_26.02.01", "mosaic_llm_foundry"}


def test_an_expert_parallel_size_no_stage_holds_runs_at_the_largest_one_it_holds_with_a_note():
    # Megatron-Bridge 25.09's DeepSeek-V3 MXFP8 variant: 256 GB200, TP1 PP8 (32 ranks a stage) beside EP64
    row, notes = pasted_row(_row(num_gpus=256, tp=1, pp=8, ep=64, vp=2))
    assert row.values["ep"] == "32"
    assert notes == ["ep=64 cannot be laid out on a pipeline stage of 32 ranks (Megatron-Core: ep x etp must divide "
                     "tp x dp x cp of a stage); simulated at ep=32, the largest that stage holds"]
    wide, _ = pasted_row(_row(num_gpus=96, tp=1, pp=4, ep=16))  # 24 ranks a stage: 8 divides both
    assert wide.values["ep"] == "8"
    twelve, _ = pasted_row(_row(num_gpus=96, tp=1, pp=8, ep=16))  # 12 ranks a stage: 4 divides both
    assert twelve.values["ep"] == "4"
    odd, none = pasted_row(_row(num_gpus=100, tp=1, pp=8, ep=16))  # no whole stage: row_workload names it
    assert odd.values["ep"] == "16" and none == []
    for fits in (_row(num_gpus=256, tp=2, pp=8, ep=16), _row(num_gpus=256, tp=1, pp=4, ep=64),
                 _row(num_gpus=64, tp=2, dp=4, pp=2, ep=8)):  # tp x dp x cp = 8 holds ep 8
        kept, none = pasted_row(fits)
        assert kept.values["ep"] == fits.values["ep"] and none == []


def test_llama31_405b_of_megatron_bridge_takes_its_recipes_pipeline_split():
    rows = read_measurements(resolve_dataset("published_runs"))
    pp16 = [r for r in rows
            if r.get("model") == "LLAMA3.1_405B" and r.get("pp") == "16" and r.get("virtual_stages") == "8"]
    assert len(pp16) == 3
    row, notes = pasted_row(pp16[0])
    assert (row.values["account_for_embedding"], row.values["account_for_loss"]) == ("true", "true")
    assert notes == ["from Megatron-Bridge's recipe for the model: account_for_embedding=true, account_for_loss=true"]
    stated, _ = pasted_row(MeasuredRow(1, {**pp16[0].values, "account_for_loss": "false"}))
    assert stated.values["account_for_loss"] == "false"  # a stated cell wins
    other, none = pasted_row(_row(framework="torchtitan", model="llama3_1_405b"))
    assert "account_for_embedding" not in other.values and none == []


@pytest.mark.slow
def test_every_row_but_hybrid_mamba_simulates_and_the_error_is_given_per_source(tmp_path, capfd):
    text = resolve_dataset("published_runs").read_text()
    res, rows = validate_table(text, tmp_path, capfd)
    assert res.code == 0, res.err
    skipped = [r for r in rows if r["skipped_reason"]]
    mamba = [r for r in skipped if "hybrid Mamba" in r["skipped_reason"]]
    assert len(mamba) == 4 and all(r["arch_type"] == "hybrid-mamba-moe" for r in mamba)
    assert len(skipped) == 4, [r["skipped_reason"] for r in skipped if r not in mamba]  # none but hybrid Mamba
    ep64 = [r for r in rows if "cannot be laid out" in r["validation_notes"]]
    assert len(ep64) == 1 and float(ep64[0]["predicted_ms"]) > 0
    pp16 = [r for r in rows if r["model"] == "LLAMA3.1_405B" and r["pp"] == "16" and r["virtual_stages"] == "8"]
    assert len(pp16) == 3 and all(float(r["predicted_ms"]) > 0 for r in pp16)
    for source in ("megatron_readme_sep2020", "nemo_24.07", "mosaic_llm_foundry", "megatron_bridge_26.02.01"):
        assert f"source {source}: MAPE: " in res.out
    summary = json.loads((tmp_path / "run" / "validation_summary.json").read_text())
    assert summary["by_source"]["mosaic_llm_foundry"]["n"] == 78
    assert summary["by_source"]["megatron_readme_sep2020"]["n"] == 12
    assert summary["pooled"]["n"] == sum(s["n"] for s in summary["by_source"].values())
    assert 0 < summary["pooled"]["mape_pct"] < 40 and 0 <= summary["pooled"]["within_10_pct"] <= 100


def test_summary_by_source_groups_the_rows_and_counts_skips():
    class R:
        def __init__(self, source, ape):
            self.row, self.ape_pct = _row(source_key=source), ape

    got = summary_by_source([R("a", 5.0), R("a", 15.0), R("b", None), R("b", 2.0)])
    assert list(got) == ["a", "b"]
    assert (got["a"].mape_pct, got["a"].within_10_pct, got["a"].n, got["a"].skipped) == (10.0, 50.0, 2, 0)
    assert (got["b"].mape_pct, got["b"].n, got["b"].skipped) == (2.0, 1, 1)
    assert summary_by_source([R("", 3.0)]) == {}


def test_a_row_silent_on_its_micro_batch_runs_one_its_schedule_takes(cfg):
    """Interleaved 1F1B on pp=4 with 8 sequences per replica: micro-batches of 4 and 8 leave fewer micro-batches
    than stages (refused by the schedule), 1 and 2 run; the row is simulated at one of those, not skipped."""
    row = _row(model="llama3_8b", gpu="H100", num_gpus=8, tp=2, pp=4, virtual_stages=2, global_batch=8,
               seq_len=4096, framework="Megatron-Bridge", tokens_per_s_per_gpu=9000)
    (res,) = validate_rows([row], cfg, defaults=None)
    assert res.skipped_reason is None, res.skipped_reason
    assert res.micro_batch in ("1", "2") and res.predicted_ms > 0


def test_published_rows_gives_each_rows_source_workload_and_measured_seconds(tmp_path):
    """The loader calibration builds on: a row as task=validate simulates it, its measured iteration time (from
    tokens/s per GPU: global batch x seq / (rate x GPUs)) and its source; a skipped row with its reason."""
    from vtrain.validation.published_rows import published_rows

    rows = read_measurements(resolve_dataset("published_runs"))
    picked = [r for r in rows if r.get("row_id") in ("191", "453", "760")]  # NeMo Llama 2 7B, Mamba, MPT-1b
    got = {p.row.get("row_id"): p for p in published_rows(name=str(_csv_of(picked, tmp_path / "three.csv")))}
    nemo, mamba, mpt = got["191"], got["453"], got["760"]
    assert nemo.source_key == "nemo_24.07" and nemo.workload.stack.name == "megatron_core_te"
    assert nemo.measured_s == pytest.approx(128 * 4096 / (16934 * 8))  # global batch x seq / (tokens/s/GPU x GPUs)
    assert (nemo.workload.plan.tp, nemo.workload.cluster.gpu.name) == (1, "h100_sxm")
    assert mpt.workload.stack.name == "llm_foundry_fsdp" and mpt.workload.plan.zero_stage == 3
    assert mpt.measured_s == pytest.approx(32 * 32768 / (5095 * 8))
    assert mamba.workload is None and "hybrid Mamba" in mamba.skipped and mamba.source_key.startswith("megatron_bridge")


def test_a_recipe_tied_to_a_layout_applies_only_to_rows_of_that_layout():
    from vtrain.validation.recipes import recipe_cells

    launcher = {"framework": "NeMo 24.05 (Megatron-Core)", "model": "GPT3-175B", "tp": "4", "pp": "8",
                "micro_batch": "1", "global_batch": "2,048"}
    assert recipe_cells(_row(**launcher)) == {"virtual_stages": "12"}  # launcher's gpt3/175b.yaml
    assert recipe_cells(_row(**{**launcher, "micro_batch": "2"})) == {}  # another layout: not that recipe's
    assert recipe_cells(_row(**{**launcher, "virtual_stages": "6"})) == {}  # stated: the row's
    assert recipe_cells(_row(**{k: v for k, v in launcher.items() if k != "pp"})) == {}
    assert recipe_cells(_row(**{**launcher, "framework": "torchtitan"})) == {}


def test_a_recipe_for_one_gpu_precision_and_release():
    from vtrain.validation.recipes import recipe_cells

    gb200 = {"framework": "Megatron-Bridge", "framework_release": "26.02.01", "model": "Qwen3_30B_a3B",
             "gpu": "GB200 (NVL72)", "precision": "MXFP8", "num_gpus": "8", "tp": "1", "pp": "1", "ep": "8",
             "micro_batch": "4", "global_batch": "512"}
    graphs = {"cuda_graph_scope": "moe_router,moe_preprocess"}
    assert recipe_cells(_row(**gb200)) == {"moe_dispatcher": "hybridep", **graphs}
    assert recipe_cells(_row(**{**gb200, "framework_release": "25.11"})) == {}  # not that release's preset
    assert recipe_cells(_row(**{**gb200, "framework_release": "25.09"})) == {}
    assert recipe_cells(_row(**{**gb200, "precision": "BF16"})) == {}  # the BF16 preset is not given here
    assert recipe_cells(_row(**{**gb200, "gpu": "B200"}))["cuda_graph_scope"] == "attn,moe_router,moe_preprocess"
    assert recipe_cells(_row(**{**gb200, "moe_dispatcher": "alltoall"})) == graphs  # a stated dispatcher is the row's


def test_an_a100_40gb_row_runs_on_the_dgx_a100_platform_of_the_80gb_part(tmp_path):
    """llm-foundry's A100-40GB rows ("RoCE 1600 Gbps") on the DGX A100 fabric (conf/cluster/_dgx_a100.yaml: NVLink
    300 GB/s, 8 x 200 Gb/s), not on the H100 nodes of the cluster named on the command line."""
    from vtrain.validation.published_rows import published_rows

    rows = read_measurements(resolve_dataset("published_runs"))
    mpt = next(r for r in rows if r.get("row_id") == "775")  # MPT-760m on 128 A100-40GB
    (got,) = published_rows(name=str(_csv_of([mpt], tmp_path / "mpt.csv")))
    cluster = got.workload.cluster
    assert (cluster.gpu.name, cluster.num_nodes) == ("a100_40gb", 16)
    assert (cluster.intra_node.bandwidth_gb_per_s, cluster.inter_node.bandwidth_gb_per_s) == (300.0, 200.0)
