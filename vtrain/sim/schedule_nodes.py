"""The host cost of Megatron-Core's combined 1F1B schedule (``overlap_moe_expert_parallel_comm``, the 1F1B
all-to-all overlap): every layer runs as separately called schedule nodes.

To overlap one micro-batch's all-to-all with another's compute, Megatron-Core splits each transformer layer into
nodes (``model_chunk_schedule_plan.py``, ``TransformerLayerSchedulePlan``): an MoE layer into attention (with the
router and the dispatch preprocessing), dispatch, MLP (the experts) and combine; a dense layer into attention and
MLP (its dispatch and combine are no-op nodes). ``TransformerLayerSchedulePlan.run`` calls them one by one, and
each call is host work the plain layer does not have (``pipeline_parallel/utils.py``, ``ScheduleNode``): a CUDA
event wait and record around a switch to the node's stream, the inputs detached and made viewless, in backward a
separate autograd-engine run (``Variable._execution_engine.run_backward``) per node, and, with the delayed weight
gradients the overlap turns on (``delay_wgrad_compute``), one more call per node that holds weights (attention and
MLP: ``backward_dw``). Per MoE layer: 4 calls in forward and 6 in backward; per dense layer 2 and 4. The work
inside each node (its kernels) is priced as before; each call adds ``StackSpec.ep_overlap_node_host_s`` of host
time (fitted, ``vtrain.calibration.loso``), at the node's place in the layer's launch queue, so that a host that is
ahead of a busy GPU hides it and a host-bound layer (small GEMMs, a fast GPU) shows it whole. The Megatron-Bridge
maintainers disabled the overlap for Qwen3-235B on B200 and B300 "due to CPU overhead" (Megatron-Bridge PR #1760,
#2669; docs/moe.md).
"""
from __future__ import annotations

from typing import List, Sequence

from vtrain.sim.launch import COMM_GROUPS, SYNC, Timed

_EP = COMM_GROUPS.index("ep") + 1  # the group index of an expert-parallel collective in a Timed entry
MOE_FORWARD_CALLS = 4  # attn, moe_dispatch, mlp, moe_combine
MOE_BACKWARD_CALLS = 6  # moe_combine, mlp, mlp backward_dw, moe_dispatch, attn, attn backward_dw
DENSE_FORWARD_CALLS = 2  # attn, mlp
DENSE_BACKWARD_CALLS = 4  # mlp, mlp backward_dw, attn, attn backward_dw


def _call(node_host_s: float) -> Timed:
    """One node call: host time only, no kernel."""
    return (0.0, node_host_s, 0.0, 0.0, 0)


def _start(timed: Sequence[Timed], i: int) -> int:
    """Where the node holding entry ``i`` (a collective) starts: before its host-sync marker, if it has one."""
    return i - 1 if i > 0 and timed[i - 1][4] == SYNC else i


def moe_layer_nodes(timed: Sequence[Timed], backward: bool, node_host_s: float) -> List[Timed]:
    """An MoE layer's launch queue with its node calls at the node boundaries the expert-parallel collectives
    mark (forward: attention | dispatch | experts | combine; backward: combine | experts, their weight gradients |
    dispatch | attention, its weight gradients). Without two expert-parallel collectives (EP 1) the calls go
    first."""
    call = _call(node_host_s)
    eps = [i for i, t in enumerate(timed) if t[4] == _EP]
    items = list(timed)
    calls = MOE_BACKWARD_CALLS if backward else MOE_FORWARD_CALLS
    if len(eps) < 2:
        return [call] * calls + items
    a, b = eps[0], eps[-1]
    if not backward:
        a0, b0 = _start(items, a), _start(items, b)
        return [call, *items[:a0], call, *items[a0:a + 1], call, *items[a + 1:b0], call, *items[b0:]]
    return [call, *items[:a + 1], call, *items[a + 1:b], call, call, items[b], call, *items[b + 1:], call]


def dense_layer_nodes(timed: Sequence[Timed], backward: bool, node_host_s: float) -> List[Timed]:
    """A dense layer of an MoE model under the combined 1F1B: its node calls before its kernels."""
    calls = DENSE_BACKWARD_CALLS if backward else DENSE_FORWARD_CALLS
    return [_call(node_host_s)] * calls + list(timed)
