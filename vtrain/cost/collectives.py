"""Collective communication times: ring/direct algorithms inside an NVLink domain, hierarchical across.

Sizes: ``nbytes`` is the full per-GPU buffer, as in XLA's collective table and nccl-tests: the
all-reduce buffer, the all-gather output, the reduce-scatter input, the all-to-all send buffer.

One tier (the NVLink domain, or the scale-out network) prices a collective of kind c over n ranks as
NCCL's tuner does (src/graph/tuning.cc: latency + size / bandwidth per algorithm and protocol, the
fastest taken):

    ring/direct, Simple protocol:  a_c + f·(n-1)·s_c + f·((n-1)/n)**x_c · S / (B·e_c)
    low-latency protocol (LL):     a_ll,c + f·(n-1)·s_c + f·((n-1)/n)**x_c · S / (B·e_ll,c)   (e_ll,c > 0)
    NVLS all-reduce (NVSwitch):    a_nvls + S / (B·e_nvls)                                    (e_nvls > 0)

f = 2 for all-reduce (reduce-scatter + all-gather, Patarasuk & Yuan 2009), 1 for the others;
x_c = 1 is the ring's (n-1)/n of the buffer, x_c < 1 a group that moves more per rank than the ring's
share at full speed (small groups use fewer NCCL channels). Absent per-kind values fall back to the
tier's ``latency_s``, ``step_latency_s``, ``efficiency``, x = 1, no LL and no NVLS: the ring model the
A100 constants were fitted with (bench/fit_nccl.py). Fitted per fabric by bench/fit_collectives.py.

A group that spans D NVLink domains with k ranks in each runs hierarchically (NCCL's tree/ring over
the node leaders): reduce-scatter inside the domain, the collective of the 1/k shard across domains,
all-gather inside the domain; across domains each GPU gets its share of its node's NICs (node bandwidth /
GPUs per node: every GPU of a node runs the same collective of its own replica or stage at once).
``ClusterSpec.hierarchical_overlap`` hides that share of the shorter phase under the longer (NCCL
pipelines the phases chunk by chunk; 0 keeps them in sequence, the A100 default). An all-to-all sends
(k-1)/n of the buffer inside the domain and (n-k)/n across it at the same time: the slower part counts;
across nodes it moves at most the tier's ``all_to_all_gb_per_s`` per GPU (NCCL's point-to-point ceiling).
"""
from __future__ import annotations

from vtrain.comm.placement import GroupPlacement
from vtrain.graph.ops import CollectiveKind
from vtrain.workload.system import GB, ClusterSpec, NetworkTier

FACTOR = {CollectiveKind.ALL_REDUCE: 2.0, CollectiveKind.ALL_GATHER: 1.0, CollectiveKind.REDUCE_SCATTER: 1.0,
          CollectiveKind.ALL_TO_ALL: 1.0, CollectiveKind.P2P: 1.0}


def tier_time_s(tier: NetworkTier, kind: CollectiveKind, n: int, nbytes: float, share: float = 1.0,
                with_call_latency: bool = True, nvls: bool = True) -> float:
    """One collective of ``kind`` over ``n`` ranks of one tier; each rank gets 1/``share`` of a link."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    k = kind.value
    f = FACTOR[kind]
    link = tier.bandwidth_bytes_per_s
    steps = f * (n - 1) * tier.kind_step_latency_s.get(k, tier.step_latency_s)
    x = tier.kind_group_exponent.get(k, 1.0)
    vol = f * (n - 1) / n * nbytes if x == 1.0 else f * ((n - 1) / n) ** x * nbytes
    fixed = tier.kind_latency_s.get(k, tier.latency_s) if with_call_latency else 0.0
    t = fixed + steps + vol / (link * tier.kind_efficiency.get(k, tier.efficiency) / share)
    e_ll = tier.ll_efficiency.get(k, 0.0)
    if e_ll > 0.0:
        ll_fixed = tier.ll_latency_s.get(k, 0.0) if with_call_latency else 0.0
        t = min(t, ll_fixed + steps + vol / (link * e_ll / share))
    if nvls and kind == CollectiveKind.ALL_REDUCE and tier.nvls_efficiency > 0.0:
        t = min(t, (tier.nvls_latency_s if with_call_latency else 0.0) + nbytes / (link * tier.nvls_efficiency / share))
    return t


def ring_time_s(n: int, nbytes: float, bw_bytes_per_s: float, tier: NetworkTier, factor: float,
                with_call_latency: bool = True) -> float:
    """Plain ring collective over ``n`` ranks at ``bw_bytes_per_s`` per rank (``factor`` = 2 all-reduce,
    1 reduce-scatter/all-gather) with the tier's scalar latencies: the A100 model."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    fixed = tier.latency_s if with_call_latency else 0.0
    return fixed + factor * (n - 1) * tier.step_latency_s + factor * (n - 1) / n * nbytes / bw_bytes_per_s


def _p2p_s(tier: NetworkTier, nbytes: float, share: float) -> float:
    """One send/recv (every rank sends to one peer): latency + bytes / bandwidth, Simple or LL protocol."""
    link = tier.bandwidth_bytes_per_s
    e = tier.kind_efficiency.get("p2p", tier.efficiency)
    t = tier.kind_latency_s.get("p2p", tier.latency_s) + nbytes / (link * e / share)
    e_ll = tier.ll_efficiency.get("p2p", 0.0)
    if e_ll > 0.0:
        t = min(t, tier.ll_latency_s.get("p2p", 0.0) + nbytes / (link * e_ll / share))
    return t


def collective_time_s(kind: CollectiveKind, nbytes: float, where: GroupPlacement, cluster: ClusterSpec) -> float:
    """Time of one collective of ``nbytes`` (the full per-GPU buffer) over the placed group."""
    n = where.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    intra, inter = cluster.intra_node, cluster.inter_node
    share = float(cluster.gpus_per_node)  # GPUs sharing a node's NICs
    if kind == CollectiveKind.P2P:
        return _p2p_s(inter, nbytes, share) if where.nodes > 1 else _p2p_s(intra, nbytes, 1.0)
    k, domains = where.per_node, where.nodes
    if domains == 1:
        return tier_time_s(intra, kind, n, nbytes)
    if kind == CollectiveKind.ALL_TO_ALL:
        net_share = share
        if inter.all_to_all_gb_per_s is not None:  # NCCL's per-GPU ceiling across nodes, whatever the NIC
            e = inter.kind_efficiency.get(kind.value, inter.efficiency)
            net_share = max(share, inter.bandwidth_bytes_per_s * e / (inter.all_to_all_gb_per_s * GB))
        return max(tier_time_s(intra, kind, k, nbytes * k / n), tier_time_s(inter, kind, domains, nbytes, net_share))
    # hierarchical: intra RS (+ intra AG for all-reduce) around an inter-domain collective on 1/k shards
    t_inter = tier_time_s(inter, kind, domains, nbytes / k, share, nvls=False)
    if kind == CollectiveKind.ALL_REDUCE:
        t_intra = (tier_time_s(intra, CollectiveKind.REDUCE_SCATTER, k, nbytes, with_call_latency=False)
                   + tier_time_s(intra, CollectiveKind.ALL_GATHER, k, nbytes, with_call_latency=False))
    else:
        t_intra = tier_time_s(intra, kind, k, nbytes, with_call_latency=False)
    return t_inter + t_intra - cluster.hierarchical_overlap * min(t_inter, t_intra)
