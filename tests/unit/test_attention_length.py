"""The fused-attention rate over lengths (gpu.flash_attention_k0_tokens): the factor's form, the keys one kernel
call sees under each context-parallel scheme, and where the fitted curve is (and is not) shipped."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.cost.analytical import FLASH_ANCHOR_KEYS, flash_length_factor
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import FlashAttention
from vtrain.graph.options import graph_options
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.partition import partition


def test_the_factor_is_one_at_and_below_the_anchor_and_rises_to_its_bound_above():
    k0 = 2100.0
    assert flash_length_factor(FLASH_ANCHOR_KEYS, k0) == 1.0
    assert flash_length_factor(1024.0, k0) == 1.0  # below the sweep's 8K: the anchor's rate, not extrapolated
    assert flash_length_factor(1e6, None) == 1.0
    rising = [flash_length_factor(k, k0) for k in (8192.0, 16384.0, 65536.0, 1e7)]
    assert rising == sorted(rising) and rising[0] > 1.0
    assert rising[-1] == pytest.approx((FLASH_ANCHOR_KEYS + k0) / FLASH_ANCHOR_KEYS, rel=1e-3)
    # k / (k + k0) over the anchor's: 64K causal (32,768 keys per query) on B200's fit
    assert flash_length_factor(32768.0, k0) == pytest.approx((32768 / 34868) / (4096 / 6196))


def _attention(*overrides):
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=8", "training.seq_len=65536", "training.global_batch_size=8",
                                *overrides]))
    graph = build_model_graph(w.model, w.plan, build_comm_plan(w, partition(w.model, w.plan)).tp,
                              opts=graph_options(w.stack))
    (op,) = [o for o in graph.layer.forward.ops if isinstance(o, FlashAttention)]
    return op


@pytest.mark.parametrize("overrides, keys", [
    ((), 32768),  # a whole causal sequence: half its keys per query on average
    (("parallelism.cp=4", "parallelism.cp_comm=p2p", "parallelism.dp=2"), 8192),  # a ring step: one s/cp block
    (("parallelism.cp=4", "parallelism.cp_comm=allgather", "parallelism.dp=2"), 32768),  # one call, all keys
    (("parallelism.cp=4", "parallelism.cp_comm=a2a", "parallelism.dp=2"), 32768),  # whole sequence, 1/cp heads
    (("parallelism.cp=4", "parallelism.cp_comm=allgather", "parallelism.dp=2", "stack=torchtitan_fsdp2"), 8192),
])
def test_the_keys_one_kernel_call_sees(overrides, keys):
    """torchtitan's all-gather CP still runs one kernel per ring step (its rotater), Megatron's p2p too."""
    assert _attention(*overrides).mean_call_keys == keys


def _gb200(seq_len, k0):
    w = build_workload(compose(["+model=llama3_8b", "+cluster=gb200_nvl72x16", "stack=megatron_core_te",
                                "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                                "parallelism.recompute=full", f"training.seq_len={seq_len}",
                                "training.global_batch_size=8"]))
    w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, flash_attention_k0_tokens=k0)))
    return simulate_workload(w, cost_model_for(w))[0].iteration_time_s


def test_blackwell_ships_the_fitted_curve_and_hopper_keeps_one_rate():
    small = ["+model=llama3_8b", "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
             "training.global_batch_size=8"]
    gb200 = build_workload(compose([*small, "+cluster=gb200_nvl72x16"])).cluster.gpu
    h100 = build_workload(compose([*small, "+cluster=h100x1024"])).cluster.gpu
    assert gb200.flash_attention_k0_tokens == 2100 and "sequence-length sweep" in gb200.provenance[
        "flash_attention_k0_tokens"]
    assert h100.flash_attention_k0_tokens is None
    assert _gb200(65536, 2100.0) < 0.95 * _gb200(65536, None)  # attention-bound at 64K: faster
    assert _gb200(4096, 2100.0) == _gb200(4096, None)  # below the anchor: unchanged
