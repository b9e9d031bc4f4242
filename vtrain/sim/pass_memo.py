"""Priced passes reused, exactly, across the plans of a search that differ only in what the passes do not see.

A pass's price (:func:`vtrain.sim.stage_costs.priced_passes`) depends on the op graph and the partition
(built once per shape, :mod:`vtrain.sim.structure`), the cost model, the placement of the groups of the
collectives inside the passes (TP, CP, EP, ETP: not the data-parallel group), the side-stream work of
ZeRO-3 and a few scalars. Plans that differ in dp alone (more or fewer micro-batches, a DP group spread
over more nodes) or in the optimizer's sharding share all of these, so a search prices their passes once;
only the pipeline transfers, whose placement follows the rank layout (and so dp), are priced per plan
(:func:`vtrain.sim.stage_costs.with_p2p`). The memo is keyed by the objects themselves (held, so an id
cannot be reused while its entry lives), emptied when it grows past :data:`_MAX_ENTRIES`, and emptied by
:func:`clear_passes` (the speed benchmark does, so that every timed call prices every op).
``tests/unit/test_pass_memo.py`` compares memoised and fresh reports over a sample of a search space.
"""
from __future__ import annotations

from typing import Dict, Hashable, Optional, Tuple

from vtrain.comm.plan import CommPlan
from vtrain.cost.base import CostModel
from vtrain.graph.blocks import ModelGraph
from vtrain.graph.ops import Collective, Group
from vtrain.sim.stage_costs import StageCosts, priced_passes, side_streams, with_p2p
from vtrain.workload.partition import StagePartition

_MAX_ENTRIES = 1024
# key -> (graph, partition, cost model: held so that their ids stay theirs; the priced passes)
_PASSES: Dict[Hashable, Tuple[ModelGraph, StagePartition, CostModel, StageCosts]] = {}
_GROUPS: Dict[int, Tuple[ModelGraph, Tuple[Group, ...]]] = {}  # id(graph) -> the groups its passes use


def _groups(graph: ModelGraph) -> Tuple[Group, ...]:
    """The groups of the collectives inside the graph's passes, in a fixed order."""
    hit = _GROUPS.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    found: set[Group] = set()
    for comp in (graph.layer, graph.embedding, graph.head, graph.moe_layer, graph.mtp, graph.tail_layer):
        if comp is not None:
            for ops in (comp.forward, comp.backward, comp.recompute):
                found.update(op.group for op in ops.ops if isinstance(op, Collective))
    groups = tuple(g for g in Group if g in found)
    if len(_GROUPS) >= _MAX_ENTRIES:
        _GROUPS.clear()
    _GROUPS[id(graph)] = (graph, groups)
    return groups


def stage_costs(graph: ModelGraph, part: StagePartition, comm: CommPlan, cost: CostModel,
                microbatch_overhead_s: float, split: bool = False, fuse: Optional[Tuple[float, float]] = None,
                overlap_slowdown: float = 0.0, graph_scopes: Tuple[str, ...] = (),
                recompute_layers: int = 0, node_host_s: float = 0.0) -> StageCosts:
    """The priced passes of each stage with the pipeline transfers, the priced passes shared by plans whose passes
    see the same inputs. ``split``: price B (recompute + input gradient) and W (weight gradient) apart; ``fuse``:
    (SM share of the dispatcher, share of the all-to-all the pair hides) to price fused forward/backward pairs
    (:func:`vtrain.sim.overlap.fused_pass`); ``overlap_slowdown``: the compute slowdown while an overlapped
    collective runs beside it; ``recompute_layers``: :func:`vtrain.sim.stage_costs.recomputed_layers`;
    ``node_host_s``: the host time of each node call of Megatron-Core's combined 1F1B
    (:mod:`vtrain.sim.schedule_nodes`)."""
    sides = side_streams(comm, cost, overlap_slowdown)
    key = (id(graph), id(part), id(cost), tuple(comm.where(g) for g in _groups(graph)), sides,
           microbatch_overhead_s, split, fuse, overlap_slowdown, graph_scopes, recompute_layers, node_host_s)
    hit = _PASSES.get(key)
    if hit is not None and hit[0] is graph and hit[1] is part and hit[2] is cost:
        return with_p2p(hit[3], part, comm, cost)
    passes = priced_passes(graph, part, comm, cost, microbatch_overhead_s, split, fuse, overlap_slowdown, sides,
                           graph_scopes, recompute_layers, node_host_s)
    if len(_PASSES) >= _MAX_ENTRIES:
        _PASSES.clear()
    _PASSES[key] = (graph, part, cost, passes)
    return with_p2p(passes, part, comm, cost)


def clear_passes() -> None:
    """Forget the priced passes (benchmarks that time the pricing, tests)."""
    _PASSES.clear()
    _GROUPS.clear()
