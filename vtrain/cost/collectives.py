"""Collective communication times: ring and hierarchical (intra-node then inter-node) algorithms.

Ring all-reduce over n GPUs: 2(n-1) steps, each moving S/n bytes (Patarasuk & Yuan 2009; the NCCL
"bus bandwidth" convention of nccl-tests, PERFORMANCE.md): t = 2(n-1)·alpha + 2(n-1)/n · S / B.
Reduce-scatter and all-gather are half of it: (n-1)·alpha + (n-1)/n · S / B.
A group that spans N nodes with k GPUs in each runs hierarchically: reduce-scatter inside the node
(k GPUs, NVLink), all-reduce of the 1/k shard across the N nodes, all-gather inside the node. Across
nodes each GPU gets its share of the node's NICs (node bandwidth / GPUs per node), because every GPU
of a node runs the same collective of its own replica or stage at the same time.
"""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.graph.ops import CollectiveKind
from vtrain.workload.system import ClusterSpec


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """How a communication group sits on the cluster: ``size`` GPUs, ``per_node`` in each node."""

    size: int
    per_node: int

    @property
    def nodes(self) -> int:
        return max(1, self.size // self.per_node)


def placement(size: int, stride: int, gpus_per_node: int) -> GroupPlacement:
    """Placement of a group of ``size`` ranks spaced ``stride`` apart (Megatron order: tp, dp, pp).

    Ranks r, r+stride, ... share a node while they fall in the same block of ``gpus_per_node`` ranks.
    """
    if size <= 1:
        return GroupPlacement(1, 1)
    per_node = max(1, min(size, gpus_per_node // stride)) if stride < gpus_per_node else 1
    return GroupPlacement(size, per_node)


def _ring_steps_time(n: int, nbytes: float, bw: float, latency_s: float, factor: float) -> float:
    """Ring collective over ``n`` ranks: ``factor`` = 2 for all-reduce, 1 for RS/AG."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return factor * (n - 1) * latency_s + factor * (n - 1) / n * nbytes / bw


def collective_time_s(kind: CollectiveKind, nbytes: float, where: GroupPlacement, cluster: ClusterSpec) -> float:
    """Time of one collective of ``nbytes`` (the full per-GPU buffer) over the placed group."""
    n = where.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    intra = cluster.intra_node
    intra_bw = intra.bandwidth_bytes_per_s * intra.efficiency
    inter_bw = cluster.inter_node_bytes_per_s_per_gpu
    inter_lat = cluster.inter_node.latency_s
    if kind == CollectiveKind.P2P:
        if where.nodes > 1:
            return inter_lat + nbytes / inter_bw
        return intra.latency_s + nbytes / intra_bw
    factor = 2.0 if kind == CollectiveKind.ALL_REDUCE else 1.0
    k, nodes = where.per_node, where.nodes
    if nodes == 1:
        return _ring_steps_time(n, nbytes, intra_bw, intra.latency_s, factor)
    # hierarchical: intra RS (+ intra AG for all-reduce) around an inter-node collective on 1/k shards
    t_inter = _ring_steps_time(nodes, nbytes / k, inter_bw, inter_lat, factor)
    t_intra = _ring_steps_time(k, nbytes, intra_bw, intra.latency_s, 1.0)
    return t_inter + (2.0 if kind == CollectiveKind.ALL_REDUCE else 1.0) * t_intra
