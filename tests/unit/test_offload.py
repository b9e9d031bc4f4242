"""Activation offloading (Megatron-Core --cpu-offloading-num-layers, Transformer Engine's copy stream): the HBM it
frees, the copies' stall on the compute stream and Megatron-Core's rules."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.sim.launch import PassCost
from vtrain.sim.memory import layer_activation_bytes
from vtrain.sim.offload import _stalled, offload_copy_s
from vtrain.sim.simulator import simulate_workload

# Megatron-Bridge's Llama 3 70B FP8-CS preset on GB300: Megatron FSDP over 64 GPUs, TP1, micro-batch 2
PRESET = ["+model=llama3_70b", "+cluster=gb300_nvl72x16", "stack=megatron_core_te", "parallelism.tp=1",
          "parallelism.pp=1", "parallelism.dp=64", "parallelism.zero_stage=3", "parallelism.micro_batch_size=2",
          "parallelism.recompute=none", "training.precision=fp8", "training.seq_len=8192",
          "training.global_batch_size=256"]


def workload(*overrides):
    return build_workload(compose([*PRESET, *overrides]))


def test_offloaded_layers_leave_hbm():
    kept, offloaded = workload(), workload("parallelism.offload_layers=20")
    per_layer = layer_activation_bytes(kept.model, kept.plan)
    a, _ = simulate_workload(kept, cost_model_for(kept))
    b, _ = simulate_workload(offloaded, cost_model_for(offloaded))
    assert a.memory.activations_bytes - b.memory.activations_bytes == pytest.approx(20 * per_layer)


def test_copies_cross_the_shared_c2c_link():
    w = workload("parallelism.offload_layers=20")
    per_layer = layer_activation_bytes(w.model, w.plan)
    assert w.cluster.gpu.host_link_gb_per_s == 225.0  # 900 GB/s bidirectional per Grace, two GPUs
    assert offload_copy_s(w) == pytest.approx(20 * per_layer / 225e9)
    assert offload_copy_s(workload()) == 0.0


def test_the_compute_stream_waits_only_on_copies_that_outlast_the_other_layers():
    c = PassCost(gpu_compute_s=0.08, comm_s=0.0, latency_s=0.0, host_s=0.0, flops=1.0)  # 80 layers of 1 ms
    assert _stalled(c, 0.079, 80) is c  # 79 layers of compute run beside the copies
    assert _stalled(c, 0.100, 80).gpu_compute_s == pytest.approx(0.08 + 0.021)


def test_hidden_copies_cost_no_time():
    w = workload("parallelism.offload_layers=20")
    a, _ = simulate_workload(w, cost_model_for(w))
    b, _ = simulate_workload(workload(), cost_model_for(workload()))
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s)
    slow = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, host_link_gb_per_s=1.0)))
    c, _ = simulate_workload(slow, cost_model_for(slow))
    assert c.iteration_time_s > b.iteration_time_s + 4 * offload_copy_s(w) * 225 * 0.9  # 4 passes stalled


@pytest.mark.parametrize("overrides", [["parallelism.pp=2", "parallelism.dp=32"], ["parallelism.recompute=full"],
                                       ["parallelism.offload_layers=80"]])
def test_megatron_core_rules(overrides):
    with pytest.raises(ConfigError, match="offload_layers"):
        workload("parallelism.offload_layers=20", *overrides)


def test_a_gpu_without_a_host_link_is_refused():
    on_h100 = [p for p in PRESET if not p.startswith("+cluster")] + ["+cluster=h100x1024"]
    with pytest.raises(ConfigError, match="host_link_gb_per_s"):
        build_workload(compose([*on_h100, "parallelism.offload_layers=20"]))
