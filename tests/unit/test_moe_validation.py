"""Measured MoE rows: the model column, the MoE/EP columns, skips with a reason for rows that break a rule."""
import functools

import pytest

from vtrain import compose
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.rows import MODERN_DEFAULTS, RowDefaults, row_workload
from vtrain.validation.run import summary_of, validate_rows

ROW = {"model": "qwen3_235b_a22b", "gpu": "h100_sxm", "num_gpus": "256", "global_batch": "2048", "micro_batch": "1",
       "seq_len": "4096", "tp": "2", "pp": "8", "dp": "16", "ep": "32", "etp": "1", "schedule": "interleaved",
       "virtual_stages": "4", "moe_dispatcher": "deepep", "recompute": "selective",
       "recompute_modules": "layernorm,moe_act", "sequence_parallel": "true", "distributed_optimizer": "true",
       "precision": "bf16", "flash_attention": "true", "account_for_embedding": "true",
       "account_for_loss": "true", "hidden_size": "", "num_heads": "", "num_layers": "",
       "iteration_time_ms": "19700"}


def workload(**changes):
    cfg = compose(["+cluster=h100x1024", "+model=tiny"])
    row = MeasuredRow(1, {**ROW, **changes})
    return row_workload(row, cfg.cluster, functools.lru_cache(None)(load_gpu_config), load_stack_config,
                        stack="megatron_core_te")


def test_model_column_fills_the_shape_and_row_columns_override_it():
    w = workload()
    assert w.model.num_experts == 128 and w.model.num_layers == 94 and w.model.kv_channels == 128
    assert w.plan.ep == 32 and w.plan.moe_dispatcher.value == "deepep"
    w2 = workload(moe_top_k="4", moe_imbalance="1.3", capacity_factor="none")
    assert w2.model.moe_top_k == 4 and w2.model.moe_imbalance == 1.3 and w2.model.capacity_factor is None
    assert workload(capacity_factor="1.25").model.capacity_factor == 1.25


def test_a_modern_moe_row_silent_on_etp_splits_its_experts_by_ep_alone():
    """NVIDIA's recipes and torchtitan run ETP 1; Megatron-LM's CLI default (ETP = TP) stays for the A100-era
    rows, whose software had no ETP. Qwen3-235B at TP 2, EP 32 on 16 DP ranks only fits with ETP 1."""
    cfg = compose(["+cluster=h100x1024", "+model=tiny"])
    row = MeasuredRow(1, {**ROW, "etp": ""})
    load_gpu = functools.lru_cache(None)(load_gpu_config)
    modern = row_workload(row, cfg.cluster, load_gpu, load_stack_config, defaults=None)
    assert modern.plan.expert_tp == 1 and modern.stack.name == "megatron_core_te"
    titan = row_workload(row, cfg.cluster, load_gpu, load_stack_config, defaults=MODERN_DEFAULTS)
    assert titan.plan.expert_tp == 1
    with pytest.raises(ConfigError, match="ep=32 must divide dp\\*cp=16"):
        row_workload(row, cfg.cluster, load_gpu, load_stack_config, defaults=RowDefaults())
    stated = row_workload(MeasuredRow(1, {**ROW, "etp": "2", "ep": "16"}), cfg.cluster, load_gpu,
                          load_stack_config, defaults=None)
    assert stated.plan.expert_tp == 2
    dense = row_workload(MeasuredRow(1, {**ROW, "model": "llama3_70b", "ep": "", "etp": ""}), cfg.cluster,
                         load_gpu, load_stack_config, defaults=None)
    assert dense.plan.expert_tp == 2 and dense.plan.ep == 1


def test_rows_with_context_parallelism_or_zero3_are_modelled():
    assert workload(cp="2", dp="8").plan.cp == 2
    assert workload(zero_stage="3").plan.sharding_stage == 3


@pytest.mark.parametrize("changes,message", [
    ({"model": "qwen3_next"}, "model='qwen3_next' names no model/ config"),
    ({"ep": "3"}, "ep=3 must divide num_experts=128"),
])
def test_rows_asking_for_what_is_not_modelled_are_skipped(changes, message):
    with pytest.raises(ConfigError, match=message):
        workload(**changes)


def test_shipped_megatron_moe_rows_error_within_the_documented_bound():
    """docs/moe.md: on the 13 Megatron-Core Qwen3-235B rows on 256 H100, MAPE 7.05%, max APE 26.7%, 10 of 13
    within 10% (the main table at forced balance, as its plan's ModelZoo script runs it). Held out but for the 4
    dropless long-context rows, which set the routing imbalance (1.60, bench/fit_moe_imbalance.py), and the ratio
    of rows 2 and 1, which set the share of the all-to-all the 1F1B overlap hides (0.50; task=calibrate
    calibrate.scope=all refits it on the overlap rows of five sources, this row among them):
    the bound is the documented figure, so a change that worsens it fails here."""
    cfg = compose(["+cluster=h100x1024"], require=False)
    rows = read_measurements(resolve_dataset("megatron_moe_qwen3_h100"))
    results = validate_rows(rows, cfg, stack="megatron_core_te")
    assert [r.skipped_reason for r in results if r.predicted_ms is None] == []
    s = summary_of(results)
    assert s.n == 13
    ape = [abs(r.predicted_ms / r.measured_ms - 1.0) * 100.0 for r in results]
    assert sum(ape) / 13 <= 7.05 + 0.005
    assert max(ape) <= 26.7 + 0.05
    assert sum(e <= 10.0 for e in ape) >= 10
    # the overlap's measured gain on one plan (rows 1 and 2: 19.7 -> 17.6 s) bounds the predicted one: a share
    # of 0.50 predicts it (the share the ratio alone gives), the calibration's lower share less of it; 0.889 against
    # 0.893 since the dispatch's host sync holds the host back across row 1's passes (vtrain.sim.host_sync: +1.0%)
    assert 17.6 / 19.7 - 0.005 <= results[1].predicted_ms / results[0].predicted_ms < 1.0
    assert all(float(r.row.values["moe_imbalance"]) == 1.0 for r in results[:5])  # the main table: forced balance
    long_context = ape[5:]  # rows 6-13: CP 1-8 at 4K-128K tokens, within 7% (docs/moe.md; 6.6% the 64K row since
    assert max(long_context) <= 7.0  # the dispatch's host sync holds the host back across passes, 5.5% before)


def test_shipped_blackwell_moe_rows_simulate_and_their_error_is_printed():
    """The held-out GB200/GB300 NVL72 rows (vtrain/data/modern_gpus/megatron_moe_qwen3_blackwell.md): each is
    simulated on its own GPU, and the error is reported, not asserted small (README: -21% to +34%).
    Every launch command forces balanced routing, so every row carries moe_imbalance 1.0; the 4K rows' commands
    replay attention, router and dispatcher preprocessing from CUDA graphs, and their rows say so."""
    from vtrain.validation.datasets import shipped_defaults

    cfg = compose(["+cluster=gb200_nvl72x16"], require=False)
    rows = read_measurements(resolve_dataset("megatron_moe_qwen3_blackwell"))
    results = validate_rows(rows, cfg, shipped_defaults("megatron_moe_qwen3_blackwell"), stack="megatron_core_te")
    assert [r.row.values["gpu"] for r in results] == ["gb200", "gb200", "gb300"]
    assert all(r.predicted_ms is not None and r.predicted_ms > 0 for r in results)
    assert all(float(r.row.values["moe_imbalance"]) == 1.0 and r.row.values["routing"].startswith("forced")
               for r in results)
    scopes = [(int(r.row.values["seq_len"]), r.row.values["cuda_graph_scope"]) for r in results]
    assert scopes == [(4096, "attn,moe_router,moe_preprocess"), (131072, ""), (4096, "attn,moe_router,moe_preprocess")]
    print(f"\nMegatron-Core Qwen3-235B on GB200/GB300 (held out): {summary_of(results).line()}")
