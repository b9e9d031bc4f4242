"""Collective communication times: ring and hierarchical (intra-node then inter-node) algorithms.

Ring all-reduce over n GPUs: 2(n-1) steps, each moving S/n bytes (Patarasuk & Yuan 2009; the NCCL
"bus bandwidth" convention of nccl-tests, PERFORMANCE.md):
    t = latency + 2(n-1)·step_latency + 2(n-1)/n · S / (B · efficiency)
Reduce-scatter and all-gather move half: (n-1) steps and (n-1)/n · S / B.
``latency`` (fixed per call), ``step_latency`` and ``efficiency`` of the intra-node tier are fitted to
nccl-tests all_reduce_perf tables (bench/fit_nccl.py; A100 data in vtrain/data/nccl_allreduce).
A group that spans N nodes with k GPUs in each runs hierarchically: reduce-scatter inside the node
(k GPUs, NVLink), all-reduce of the 1/k shard across the N nodes, all-gather inside the node. Across
nodes each GPU gets its share of the node's NICs (node bandwidth / GPUs per node), because every GPU
of a node runs the same collective of its own replica or stage at the same time.
"""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.graph.ops import CollectiveKind
from vtrain.workload.system import ClusterSpec, NetworkTier


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


def ring_time_s(n: int, nbytes: float, bw_bytes_per_s: float, tier: NetworkTier, factor: float,
                with_call_latency: bool = True) -> float:
    """Ring collective over ``n`` ranks: ``factor`` = 2 for all-reduce, 1 for reduce-scatter/all-gather."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    fixed = tier.latency_s if with_call_latency else 0.0
    return fixed + factor * (n - 1) * tier.step_latency_s + factor * (n - 1) / n * nbytes / bw_bytes_per_s


def collective_time_s(kind: CollectiveKind, nbytes: float, where: GroupPlacement, cluster: ClusterSpec) -> float:
    """Time of one collective of ``nbytes`` (the full per-GPU buffer) over the placed group."""
    n = where.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    intra, inter = cluster.intra_node, cluster.inter_node
    intra_bw = intra.bandwidth_bytes_per_s * intra.efficiency
    inter_bw = cluster.inter_node_bytes_per_s_per_gpu
    if kind == CollectiveKind.ALL_TO_ALL:
        return all_to_all_time_s(nbytes, where, cluster)
    if kind == CollectiveKind.P2P:
        if where.nodes > 1:
            return inter.latency_s + nbytes / inter_bw
        return intra.latency_s + nbytes / intra_bw
    factor = 2.0 if kind == CollectiveKind.ALL_REDUCE else 1.0
    k, nodes = where.per_node, where.nodes
    if nodes == 1:
        return ring_time_s(n, nbytes, intra_bw, intra, factor)
    # hierarchical: intra RS (+ intra AG for all-reduce) around an inter-node collective on 1/k shards
    t_inter = ring_time_s(nodes, nbytes / k, inter_bw, inter, factor)
    t_intra = ring_time_s(k, nbytes, intra_bw, intra, 1.0, with_call_latency=False)
    return t_inter + (2.0 if kind == CollectiveKind.ALL_REDUCE else 1.0) * t_intra


def all_to_all_time_s(nbytes: float, where: GroupPlacement, cluster: ClusterSpec) -> float:
    """All-to-all of ``nbytes`` per GPU (1/n to each rank): the (k-1)/n for the ranks of its NVLink domain
    go over NVLink while the (n-k)/n for the others go over the GPU's share of the node's NICs, at once
    (NCCL runs the n-1 sends and receives concurrently; nccl-tests PERFORMANCE.md: alltoall busbw =
    algbw·(n-1)/n). One call latency of the slower tier."""
    n, k = where.size, min(where.per_node, where.size)
    if n <= 1 or nbytes <= 0:
        return 0.0
    intra, inter = cluster.intra_node, cluster.inter_node
    t_intra = (k - 1) / n * nbytes / (intra.bandwidth_bytes_per_s * intra.efficiency)
    if where.nodes == 1:
        return intra.latency_s + t_intra
    t_inter = (n - k) / n * nbytes / cluster.inter_node_bytes_per_s_per_gpu
    return inter.latency_s + max(t_intra, t_inter)
