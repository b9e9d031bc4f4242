"""All-to-all context parallelism (DeepSpeed-Ulysses; Megatron-Core's --cp-comm-type a2a): comm.cp, the
graph's placement of the all-to-alls, the plan rule and validate's spellings, hand-computed."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.comm.cp import cp_comms
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective, CollectiveKind, FlashAttention
from vtrain.graph.options import graph_options
from vtrain.validation.rows import enum_key
from vtrain.workload.enums import CpComm
from vtrain.workload.partition import partition

# Llama 3 70B: 64 query heads, 8 K/V heads of 128; tp 4 leaves 2 K/V heads per rank for cp 2
LLAMA = ["+model=llama3_70b", "+cluster=h100x1024", "parallelism.tp=4", "parallelism.pp=4", "parallelism.cp=2",
         "parallelism.dp=4", "training.seq_len=16384", "training.global_batch_size=64", "parallelism.cp_comm=a2a"]


def test_all_to_all_bytes_by_hand():
    w = build_workload(compose(LLAMA))
    c = cp_comms(w.model, w.plan)
    per_feature = 16384 / 2 / 4 * 2  # s/cp tokens of this TP rank's heads, bf16
    q, kv = 64 * 128, 2 * 8 * 128
    (qkv,), (out,) = c.forward, c.forward_after
    (dout,), (dqkv,) = c.backward, c.backward_after
    assert qkv.kind == out.kind == dout.kind == dqkv.kind == CollectiveKind.ALL_TO_ALL
    assert qkv.bytes == dqkv.bytes == pytest.approx((q + kv) * per_feature)
    assert out.bytes == dout.bytes == pytest.approx(q * per_feature)
    assert not any(op.overlap for op in (qkv, out, dout, dqkv))  # the attention waits for all of its input


def test_the_all_to_alls_sit_around_the_attention_core():
    w = build_workload(compose(LLAMA))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    layer = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack)).layer
    fwd = [op.name for op in layer.forward.ops]
    i = fwd.index("flash_attn")
    assert fwd[i - 1] == "cp.qkv_a2a" and fwd[i + 1] == "cp.out_a2a"
    bwd = [op.name for op in layer.backward.ops]
    j = bwd.index("flash_attn.bwd")
    assert bwd[j - 1] == "cp.dout_a2a.bwd" and bwd[j + 1] == "cp.dqkv_a2a.bwd"
    fa = layer.forward.ops[i]
    assert isinstance(fa, FlashAttention) and fa.kernels == 1  # one kernel over the whole sequence


def test_same_attention_flops_as_the_ring_and_its_own_communication():
    a2a = simulate(compose(LLAMA))
    ring = simulate(compose([*LLAMA, "parallelism.cp_comm=p2p"]))
    assert a2a.model_flops_per_iteration == pytest.approx(ring.model_flops_per_iteration)
    assert a2a.iteration_time_s != ring.iteration_time_s
    cp_a2a = max(s.exposed_comm_by_group["cp"] for s in a2a.stages)
    assert cp_a2a > 0.0  # blocking all-to-alls show up as exposed CP communication


def test_heads_must_split_over_the_cp_ranks():
    with pytest.raises(ConfigError, match="cp_comm=a2a needs cp=2 to divide the kv heads per TP rank=1"):
        simulate(compose([*LLAMA, "parallelism.tp=8", "parallelism.dp=2"]))


def test_torchtitan_runs_no_ring_merges_for_an_all_to_all():
    w = build_workload(compose([*LLAMA, "stack=torchtitan_fsdp2"]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    layer = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack)).layer
    names = [op.name for op in layer.forward.ops]
    assert "cp.qkv_a2a" in names and not any(n.startswith("flash_attn.ring") for n in names)
    assert all(isinstance(op, Collective) or op.kernels == 1 for op in layer.forward.ops
               if isinstance(op, FlashAttention))


@pytest.mark.parametrize("cell,value", [("all_gather", CpComm.ALLGATHER), ("A2A", CpComm.A2A),
                                        ("Ulysses", CpComm.A2A), ("ring", CpComm.P2P), ("p2p", CpComm.P2P)])
def test_megatron_spellings_of_the_cp_comm_type(cell, value):
    assert CpComm(enum_key(CpComm, cell)) == value
