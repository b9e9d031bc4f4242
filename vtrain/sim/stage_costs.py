"""Price the op graph per pipeline stage and model chunk: the durations the schedule engine runs.

A pass (forward, or recompute + backward) of a chunk takes max(GPU time, host time): the GPU time is
the sum of its kernels and its blocking TP collectives; the host time is the framework's time to
issue those kernels. Small layers are host-bound (a few ms per layer in Megatron), large ones
GPU-bound; the maximum is the usual asynchronous-launch model (the host queues ahead of the GPU).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

from vtrain.cost.base import CostModel
from vtrain.cost.collectives import GroupPlacement, placement
from vtrain.graph.builder import ModelGraph, PassOps
from vtrain.graph.ops import Collective, CollectiveKind, Group
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec


@dataclass(frozen=True, slots=True)
class PassCost:
    gpu_compute_s: float
    comm_s: float  # blocking TP collectives
    host_s: float
    flops: float

    @property
    def gpu_s(self) -> float:
        return self.gpu_compute_s + self.comm_s

    @property
    def duration_s(self) -> float:
        return max(self.gpu_s, self.host_s)

    @property
    def host_excess_s(self) -> float:
        return max(0.0, self.host_s - self.gpu_s)

    def __add__(self, other: "PassCost") -> "PassCost":
        return PassCost(self.gpu_compute_s + other.gpu_compute_s, self.comm_s + other.comm_s,
                        self.host_s + other.host_s, self.flops + other.flops)

    def __mul__(self, k: float) -> "PassCost":
        return PassCost(self.gpu_compute_s * k, self.comm_s * k, self.host_s * k, self.flops * k)


ZERO = PassCost(0.0, 0.0, 0.0, 0.0)


def price_pass(ops: PassOps, cost: CostModel, tp_where: GroupPlacement) -> PassCost:
    compute = comm = 0.0
    kernels = 0
    for op in ops.ops:
        kernels += op.kernels
        if isinstance(op, Collective):
            comm += cost.collective_time_s(op, tp_where)
        else:
            compute += cost.compute_time_s(op)
    return PassCost(compute, comm, cost.host_time_s(kernels), ops.flops)


@dataclass(frozen=True, slots=True)
class StageCosts:
    """Per (stage, chunk): forward and backward(+recompute) pass costs; per boundary: p2p times."""

    forward: Tuple[Tuple[PassCost, ...], ...]  # [stage][chunk]
    backward: Tuple[Tuple[PassCost, ...], ...]
    p2p_fwd_s: Tuple[float, ...]  # boundary into position q (q = 0..P-1; 0 unused)
    p2p_bwd_s: Tuple[float, ...]  # boundary out of position q+1 into q
    params: Tuple[Tuple[float, ...], ...]  # parameters per GPU [stage][chunk]
    embedding_params: float  # word-embedding parameters per GPU (tied-embedding sync)

    def durations(self) -> List[float]:
        """Flat list indexed like CompiledSchedule.dur_key: stage·2v + is_bwd·v + chunk."""
        out: List[float] = []
        for fwd, bwd in zip(self.forward, self.backward):
            out += [c.duration_s for c in fwd] + [c.duration_s for c in bwd]
        return out

    def lags(self) -> List[float]:
        out: List[float] = []
        for f, b in zip(self.p2p_fwd_s, self.p2p_bwd_s):
            out += [f, b]
        return out


def stage_of_layers(num_layers: int, plan: ParallelPlan) -> int:
    return num_layers // (plan.pp * plan.chunks)


def tp_placement(plan: ParallelPlan, cluster: ClusterSpec) -> GroupPlacement:
    return placement(plan.tp, 1, cluster.gpus_per_node)


def dp_placement(plan: ParallelPlan, cluster: ClusterSpec) -> GroupPlacement:
    return placement(plan.dp, plan.tp, cluster.gpus_per_node)


def p2p_crosses_node(plan: ParallelPlan, cluster: ClusterSpec, src_stage: int, dst_stage: int) -> bool:
    """Megatron rank order (tp fastest, then dp, then pp): stage s starts at rank s·t·d."""
    stride = plan.tp * plan.dp
    g = cluster.gpus_per_node
    return (src_stage * stride) // g != (dst_stage * stride) // g


def build_stage_costs(model: ModelSpec, plan: ParallelPlan, cluster: ClusterSpec, graph: ModelGraph,
                      cost: CostModel) -> StageCosts:
    p, v = plan.pp, plan.chunks
    tp_where = tp_placement(plan, cluster)
    layers_per_chunk = stage_of_layers(model.num_layers, plan)
    layer_f = price_pass(graph.layer.forward, cost, tp_where)
    layer_b = price_pass(graph.layer.recompute, cost, tp_where) + price_pass(graph.layer.backward, cost, tp_where)
    emb_f = price_pass(graph.embedding.forward, cost, tp_where)
    emb_b = price_pass(graph.embedding.backward, cost, tp_where)
    head_f = price_pass(graph.head.forward, cost, tp_where)
    head_b = price_pass(graph.head.backward, cost, tp_where)

    t = plan.tp
    layer_params = (model.attention_params() + model.mlp_params()) / t + 2 * model.norm_params()
    word_emb = model.vocab_size / t * model.hidden_size
    emb_params = model.embedding_params() - model.vocab_size * model.hidden_size + word_emb
    head_params = model.norm_params() + (word_emb if (not model.tied_embeddings or p > 1) else 0.0)

    last = p * v - 1
    forward, backward, params = [], [], []
    for s in range(p):
        f_row, b_row, p_row = [], [], []
        for c in range(v):
            q = c * p + s
            f, b = layer_f * layers_per_chunk, layer_b * layers_per_chunk
            n = layer_params * layers_per_chunk
            if q == 0:
                f, b, n = emb_f + f, b + emb_b, n + emb_params
            if q == last:
                f, b, n = f + head_f, head_b + b, n + head_params
            f_row.append(f)
            b_row.append(b)
            p_row.append(n)
        forward.append(tuple(f_row))
        backward.append(tuple(b_row))
        params.append(tuple(p_row))

    act_bytes = plan.micro_batch_size * plan.seq_len * model.hidden_size * plan.dtype_bytes
    if plan.sequence_parallel:
        act_bytes //= t
    p2p_f: List[float] = [0.0] * (p * v)
    p2p_b: List[float] = [0.0] * (p * v)

    msg = Collective("p2p", CollectiveKind.P2P, float(act_bytes), Group.PP, 2)
    for q in range(1, p * v):
        src, dst = (q - 1) % p, q % p
        where = GroupPlacement(2, 1 if p2p_crosses_node(plan, cluster, src, dst) else 2)
        p2p_f[q] = p2p_b[q - 1] = cost.collective_time_s(msg, where)
    return StageCosts(tuple(forward), tuple(backward), tuple(p2p_f), tuple(p2p_b), tuple(params),
                      word_emb if (model.tied_embeddings and p > 1) else 0.0)
