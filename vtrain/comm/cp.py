"""Context-parallel attention communication (Megatron-Core's context parallelism; Liu et al. 2023, "Ring
Attention"). Each of the cp ranks holds s/cp tokens (2 chunks of s/(2cp) for causal load balancing) and
attends to the whole sequence's keys and values.

- ``p2p`` (ring): KV blocks travel around the CP ring, one step per rank, each transfer overlapped with the
  attention of the block already there. Its volume is a ring all-gather of K and V ((cp-1)/cp of the full
  KV per rank) spread over cp steps; backward sends KV again plus the KV gradients back (twice the volume).
- ``allgather`` (Llama 3's CP): K and V are all-gathered before attention (blocking) and their gradients
  reduce-scattered after the attention backward.
- ``a2a`` (DeepSpeed-Ulysses, Jacobs et al. 2023; Megatron-Core's ``--cp-comm-type a2a``, Transformer Engine's
  ``AttnFuncWithCPAndQKVOA2A``): an all-to-all turns each rank's s/cp tokens of all heads into all s tokens of
  heads/cp for Q, K and V before the attention, and one turns the output back after it; the backward runs the
  same two in reverse (the output gradient before the attention backward, the Q/K/V gradients after it). On
  the compute stream: the attention needs all of its input and the next layer all of its output.
- ``allgather`` in PyTorch's context parallelism (``pytorch_ring``: ``StackSpec.cp_ring_merge``,
  ``_AllGatherRotater``): the all-gather is issued before the first ring step, which attends to the local
  block beside it, and waited for at the second; the backward gathers K/V the same way and passes the K/V
  gradients around the ring (``dkv_rotater``, always point-to-point), each step's transfer beside the next
  step's attention backward. Those are taken as hidden (a step's transfer is shorter than a step's attention
  backward: 4.5 vs 84 ms for Llama 3 8B at 256K tokens on 8 H100, 11 vs 42 ms for 405B at 256K with its CP
  ranks on 8 nodes); the last one, which brings each rank's own gradients home, is waited for.

A stack whose attention repeats grouped K/V heads to every query head before the kernel
(``StackSpec.attention_expands_kv``: torchtitan's Llama, ``repeat_kv`` before SDPA) exchanges the repeated
heads; one that reduces the K/V gradients in fp32 (``cp_grads_fp32``: PyTorch's context parallelism,
``_cp_options.convert_to_f32``) sends them at 4 bytes per element.
"""
from __future__ import annotations

from vtrain.graph.collectives import CpComms, kv_features
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.enums import CpComm
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


def cp_comms(model: ModelSpec, plan: ParallelPlan, expands_kv: bool = False, grads_fp32: bool = False,
             pytorch_ring: bool = False) -> CpComms:
    cp = plan.cp
    if cp == 1:
        return CpComms((), (), ())
    kv_bytes = plan.micro_batch_size * plan.seq_len * kv_features(model, expands_kv) / plan.tp * plan.dtype_bytes
    grad_bytes = kv_bytes * (4.0 / plan.dtype_bytes if grads_fp32 else 1.0)
    ag, rs = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    if plan.cp_comm == CpComm.P2P:
        fwd = Collective("cp.kv_ring", ag, kv_bytes, Group.CP, cp, overlap="next", chunks=cp)
        bwd = Collective("cp.kv_ring.bwd", ag, kv_bytes + grad_bytes, Group.CP, cp, overlap="next", chunks=cp)
        return CpComms((fwd,), (bwd,), ())
    if plan.cp_comm == CpComm.A2A:  # per rank: its s/cp tokens of every head on this TP rank, out and back
        per_feature = plan.micro_batch_size * plan.seq_len / cp / plan.tp * plan.dtype_bytes
        mla = model.is_mla
        q_features = model.num_heads * model.mla_qk_dim if mla else model.q_size
        out_bytes = (model.num_heads * model.v_head_dim if mla else model.q_size) * per_feature
        qkv_bytes = (q_features + kv_features(model, expands_kv)) * per_feature
        a2a = CollectiveKind.ALL_TO_ALL
        return CpComms((Collective("cp.qkv_a2a", a2a, qkv_bytes, Group.CP, cp),),
                       (Collective("cp.dout_a2a.bwd", a2a, out_bytes, Group.CP, cp),),
                       (Collective("cp.dqkv_a2a.bwd", a2a, qkv_bytes, Group.CP, cp),),
                       (Collective("cp.out_a2a", a2a, out_bytes, Group.CP, cp),))
    if pytorch_ring:
        return CpComms((Collective("cp.kv_gather", ag, kv_bytes, Group.CP, cp, overlap="first", chunks=cp),),
                       (Collective("cp.kv_gather.bwd", ag, kv_bytes, Group.CP, cp, overlap="first", chunks=cp),),
                       (Collective("cp.dkv_ring.last", CollectiveKind.P2P, grad_bytes / cp, Group.CP, cp),))
    return CpComms((Collective("cp.kv_gather", ag, kv_bytes, Group.CP, cp),),
                   (Collective("cp.kv_gather.bwd", ag, kv_bytes, Group.CP, cp),),
                   (Collective("cp.dkv_scatter", rs, grad_bytes, Group.CP, cp),))
