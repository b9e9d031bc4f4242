"""The Megatron-LM weak-scaling rows run as the authors' script states (examples/sc21/run_table_1.sh), and the
joint fit shares its fitted stack constants with the rows' own stack (Megatron-LM 2021)."""
from __future__ import annotations

import shutil
from dataclasses import replace

from vtrain.calibration.fit import Constants, predict_s
from vtrain.validation.datasets import data_path, weak_scaling_workloads
from vtrain.validation.weak_scaling import read_weak_scaling, row_workload, weak_scaling_cluster


def _plans():
    cluster = weak_scaling_cluster()
    rows = read_weak_scaling(data_path("megatron_2021_weak_scaling.csv"))
    return {r.model: row_workload(r, cluster, i + 1).plan for i, r in enumerate(rows)}


def test_each_row_takes_its_scripts_micro_batch_interleaving_and_ddp():
    plans = _plans()
    small = plans["GPT 1.7B"]  # MBS=16, DDP=torch: one micro-batch, its all-reduce in 25 MiB buckets beside it
    assert (small.micro_batch_size, small.chunks, small.overlap_grad_reduce, small.grad_bucket_mib) == (16, 1, True, 25)
    mid = plans["GPT 76.1B"]  # MBS=2, 5 layers per virtual stage: 60 / (4 x 5) = 3 chunks, DDP=local
    assert (mid.micro_batch_size, mid.chunks, mid.overlap_grad_reduce) == (2, 3, False)
    assert plans["GPT 529.6B"].chunks == 3  # 105 / (35 x 1)
    largest = plans["GPT 1008.0B"]  # no --num-layers-per-virtual-pipeline-stage: plain 1F1B
    assert (largest.micro_batch_size, largest.chunks) == (1, 1)


def test_a_table_without_its_run_configs_falls_back_to_the_assumptions(tmp_path):
    table = tmp_path / "weak.csv"
    shutil.copy(data_path("megatron_2021_weak_scaling.csv"), table)
    rows = read_weak_scaling(table)
    assert all(r.micro_batch is None and r.ddp_impl == "" for r in rows)
    cluster = weak_scaling_cluster()
    plan = row_workload(rows[0], cluster, 1).plan  # 16 sequences per replica: the largest of 8/4/2/1 that divides
    assert (plan.micro_batch_size, plan.overlap_grad_reduce) == (8, False)


def test_the_weak_scaling_rows_share_the_fitted_host_time_and_keep_their_optimizer():
    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig
    from vtrain.validation.datasets import single_node_workloads

    single, _, _ = single_node_workloads(load_group_config("cluster", "vtrain_a100", ClusterConfig), None,
                                         "megatron_deepspeed_2022")
    weak, _, _ = weak_scaling_workloads()
    assert (weak[0].stack.name, weak[0].stack.optimizer_bytes_per_param) == ("megatron_lm_2021", 54.0)
    base = Constants.of(single[0])
    moved = base.with_values({"host_time_per_kernel_s": 9e-5, "optimizer_bytes_per_param": 20.0})
    stack = moved.stack_of(weak[0])
    assert stack.name == "megatron_lm_2021" and stack.host_time_per_kernel_s == 9e-5
    assert stack.optimizer_bytes_per_param == 54.0  # its own value, not the base stack's
    assert moved.stack_of(single[0]).optimizer_bytes_per_param == 20.0
    slower = base.with_values({"host_time_per_kernel_s": 2 * base.stack.host_time_per_kernel_s})
    w = [replace(weak[0])]
    assert predict_s(w, slower)[0] > predict_s(w, base)[0]
