"""How a communication group sits on the cluster: its size and how many of its ranks share an NVLink domain;
each group of a plan placed in Megatron-Core's rank order (tp, cp, dp, pp).
The communication plan (:mod:`vtrain.comm.plan`) places each group; the cost models
(:mod:`vtrain.cost.collectives`) price a collective from its placement."""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """How a communication group sits on the cluster: ``size`` GPUs, ``per_node`` of them inside each NVLink
    domain (the node, or a multi-node domain such as an NVL72 rack: ``ClusterSpec.domain_size``)."""

    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        """NVLink domains the group spans."""
        return max(1, self.size // self.per_node)


def placement(size: int, stride: int, gpus_per_node: int) -> GroupPlacement:
    """Placement of a group of ``size`` ranks spaced ``stride`` apart (Megatron order: tp, dp, pp).

    Ranks r, r+stride, ... share a domain while they fall in the same block of ``gpus_per_node`` ranks
    (pass ``cluster.domain_size`` to place groups by NVLink domain: :func:`domain_placement`).
    """
    if size <= 1:
        return GroupPlacement(1, 1)
    per_node = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return GroupPlacement(size, per_node)


def domain_placement(size: int, stride: int, cluster: ClusterSpec) -> GroupPlacement:
    """:func:`placement` by NVLink domain: a group inside one NVL72 rack runs at NVLink speed across trays."""
    return placement(size, stride, cluster.domain_size)


def tp_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    return placement(plan.tp, 1, domain)


def cp_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    """CP groups next to TP in Megatron-Core's rank order (tp, cp, dp, pp): inside a node first."""
    return placement(plan.cp, plan.tp, domain)


def dp_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    """The gradient-reduction group: the dp replicas and, holding the same weights, the cp ranks."""
    return placement(plan.dp * plan.cp, plan.tp, domain)


def shard_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    """The ZeRO/FSDP shard group: dp_shard x cp consecutive ranks after TP (hybrid sharding shards inside
    it and replicates across the dp / dp_shard groups, which stride by it)."""
    return placement(plan.dp_shard * plan.cp, plan.tp, domain)


def replica_placement(plan: ParallelPlan, domain: int) -> GroupPlacement:
    return placement(plan.dp // plan.dp_shard, plan.tp * plan.cp * plan.dp_shard, domain)


def stages_share_domain(plan: ParallelPlan, domain: int, a: int, b: int) -> bool:
    """Whether stages ``a`` and ``b`` (same TP/CP/DP index) sit in one NVLink domain (stage s: rank s·t·c·d)."""
    stride = plan.tp * plan.cp * plan.dp
    return (a * stride) // domain == (b * stride) // domain
