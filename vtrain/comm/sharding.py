"""Communication of sharded data parallelism (ZeRO stage 3 / FSDP): per transformer layer and micro-batch,
the layer's parameters are all-gathered over the shard group before its forward (and again before its
backward when they were freed after forward: FSDP's reshard_after_forward, DeepSpeed's default), and its
gradients reduce-scattered after its backward (Rajbhandari et al. 2020, Sec. 5.3; PyTorch FSDP2). With
hybrid sharding (``fsdp_shard_size`` < dp) the reduced shard is then all-reduced across the replicas.
Parameters travel in the activation dtype (bf16; torchao's optional FP8 all-gather is not modelled),
gradients in the reduce dtype (fp32 with bf16).

Under a pipeline schedule, torch.distributed.pipelining runs every backward but a stage's last with FSDP2's
gradient sync off (``_PipelineStageBase.backward_maybe_with_nosync``: set_requires_gradient_sync(False),
set_reshard_after_backward(False)) and then calls each layer group's post-backward: the stage's gradients
accumulate unsharded and are reduce-scattered once, after its last backward; torchtitan keeps parameters
gathered with PP (``reshard_after_forward=False``: "to avoid per-microbatch all-gathers"), so they are
gathered once per iteration. ``StackSpec.pipeline_defers_fsdp_sync`` says a stack does this.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.partition import StagePartition
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.workload import Workload


@dataclass(frozen=True, slots=True)
class FsdpComms:
    gather: Collective  # one layer's parameters, per forward (and backward when ``regather``)
    reduce: Collective  # one layer's gradients, per backward
    replica_reduce: Optional[Collective]  # hybrid sharding: the reduced shard all-reduced across replicas
    regather: bool
    reduce_per_layer: bool = True  # False: the gradients go once per iteration (:func:`deferred_sync`)
    copy_out_bytes: float = 0.0  # per gathered layer on the compute stream (StackSpec.fsdp_copy_out)


def deferred_sync(plan: ParallelPlan, stack: StackSpec) -> bool:
    """Whether ZeRO-3 reduces a stage's gradients once per iteration (after its last backward) instead of per
    layer and micro-batch: a pipeline schedule on a stack that defers FSDP's gradient sync."""
    return plan.sharding_stage == 3 and plan.pp > 1 and stack.pipeline_defers_fsdp_sync


def fsdp_comms(layer_params: float, plan: ParallelPlan, grad_bytes: float, reduce_per_layer: bool = True,
               copy_out: bool = False) -> FsdpComms:
    shard = plan.dp_shard * plan.cp
    gather = Collective("fsdp.param_gather", CollectiveKind.ALL_GATHER, layer_params * plan.dtype_bytes, Group.DP,
                        shard)
    reduce = Collective("fsdp.grad_reduce_scatter", CollectiveKind.REDUCE_SCATTER, layer_params * grad_bytes,
                        Group.DP, shard)
    replicas = plan.dp // plan.dp_shard
    replica = None
    if replicas > 1:
        replica = Collective("fsdp.grad_replica_all_reduce", CollectiveKind.ALL_REDUCE,
                             layer_params * grad_bytes / shard, Group.DP, replicas)
    copy = 2.0 * gather.bytes if copy_out else 0.0  # read the gathered buffer, write the parameters
    return FsdpComms(gather, reduce, replica, plan.reshard_after_forward, reduce_per_layer, copy)


def expert_fsdp_comms(expert_params: float, plan: ParallelPlan, grad_bytes: float,
                      reduce_per_layer: bool = True, copy_out: bool = False) -> FsdpComms:
    """The routed experts of one MoE layer under ZeRO-3: gathered and reduce-scattered over the
    expert-data-parallel group, the ranks that hold the same experts (Megatron-FSDP shards expert
    parameters over edp, dense ones over dp·cp)."""
    edp = plan.expert_dp
    gather = Collective("fsdp.expert_param_gather", CollectiveKind.ALL_GATHER, expert_params * plan.dtype_bytes,
                        Group.EDP, edp)
    reduce = Collective("fsdp.expert_grad_reduce_scatter", CollectiveKind.REDUCE_SCATTER, expert_params * grad_bytes,
                        Group.EDP, edp)
    return FsdpComms(gather, reduce, None, plan.reshard_after_forward, reduce_per_layer,
                     2.0 * gather.bytes if copy_out else 0.0)


@dataclass(frozen=True, slots=True)
class Sharding:
    """How ZeRO-3 / FSDP syncs: parameters gathered and gradients reduced per layer (in the passes) or once per
    iteration (:func:`deferred_sync`), with the per-layer collectives."""

    deferred: bool
    gather_per_layer: bool
    reduce_per_layer: bool
    fsdp: Optional[FsdpComms] = None
    fsdp_moe: Optional[FsdpComms] = None  # an MoE layer's non-expert parameters, over dp·cp
    fsdp_experts: Optional[FsdpComms] = None  # its routed experts, over edp


def sharding_of(w: Workload, part: StagePartition) -> Sharding:
    """How the workload's ZeRO stage and stack sync the sharded parameters and gradients, with ``part``'s
    per-layer collectives."""
    plan, stage = w.plan, w.plan.sharding_stage
    deferred = deferred_sync(plan, w.stack)  # a pipeline on FSDP2: gradients once, kept parameters gathered once
    gather_per_layer = stage == 3 and not (deferred and not plan.reshard_after_forward)
    reduce_per_layer = stage == 3 and not deferred
    if not gather_per_layer:
        return Sharding(deferred, gather_per_layer, reduce_per_layer)
    gbytes, copy = plan.grad_bytes, w.stack.fsdp_copy_out
    fsdp = fsdp_comms(part.layer_params, plan, gbytes, reduce_per_layer, copy)
    if not w.model.is_moe:
        return Sharding(deferred, gather_per_layer, reduce_per_layer, fsdp)
    return Sharding(deferred, gather_per_layer, reduce_per_layer, fsdp,
                    fsdp_comms(part.moe_layer_params - part.expert_layer_params, plan, gbytes, reduce_per_layer, copy),
                    expert_fsdp_comms(part.expert_layer_params, plan, gbytes, reduce_per_layer, copy))
