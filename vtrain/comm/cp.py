"""Context-parallel attention communication (Megatron-Core's context parallelism; Liu et al. 2023, "Ring
Attention"). Each of the cp ranks holds s/cp tokens (2 chunks of s/(2cp) for causal load balancing) and
attends to the whole sequence's keys and values.

- ``p2p`` (ring): KV blocks travel around the CP ring, one step per rank, each transfer overlapped with the
  attention of the block already there. Its volume is a ring all-gather of K and V ((cp-1)/cp of the full
  KV per rank) spread over cp steps; backward sends KV again plus the KV gradients back (twice the volume).
- ``allgather`` (Llama 3's CP): K and V are all-gathered before attention (blocking) and their gradients
  reduce-scattered after the attention backward.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.enums import CpComm
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


@dataclass(frozen=True, slots=True)
class CpComms:
    forward: Tuple[Collective, ...]  # before the attention core
    backward: Tuple[Collective, ...]  # before (ring: with) the attention backward
    backward_after: Tuple[Collective, ...]  # after the attention backward (all-gather variant)


def cp_comms(model: ModelSpec, plan: ParallelPlan) -> CpComms:
    cp = plan.cp
    if cp == 1:
        return CpComms((), (), ())
    kv_bytes = 2.0 * plan.micro_batch_size * plan.seq_len * model.kv_size / plan.tp * plan.dtype_bytes
    ag, rs = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    if plan.cp_comm == CpComm.P2P:
        fwd = Collective("cp.kv_ring", ag, kv_bytes, Group.CP, cp, overlap="next", chunks=cp)
        bwd = Collective("cp.kv_ring.bwd", ag, 2 * kv_bytes, Group.CP, cp, overlap="next", chunks=cp)
        return CpComms((fwd,), (bwd,), ())
    return CpComms((Collective("cp.kv_gather", ag, kv_bytes, Group.CP, cp),),
                   (Collective("cp.kv_gather.bwd", ag, kv_bytes, Group.CP, cp),),
                   (Collective("cp.dkv_scatter", rs, kv_bytes, Group.CP, cp),))
