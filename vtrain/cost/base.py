"""The cost-model interface: the time of one compute op on one GPU, and of one collective.

Implementations: :mod:`vtrain.cost.analytical` (roofline with shape-dependent efficiency) and the
profile look-up (measured operator tables). Both also report the host time to launch an op, since
small layers are bound by the framework, not the GPU.
"""
from __future__ import annotations

from typing import FrozenSet, Protocol, Tuple

from vtrain.comm.placement import GroupPlacement
from vtrain.graph.ops import Collective, ComputeOp


class CostModel(Protocol):
    name: str

    def compute_time_s(self, op: ComputeOp) -> float:
        """GPU time of one compute op."""

    def host_time_s(self, kernels: float) -> float:
        """Host (framework + launch) time to issue ``kernels`` kernels."""

    def kernels_of(self, op: ComputeOp) -> float:
        """Kernels the framework launches for ``op`` (an eager framework splits a fused op into several)."""

    def collective_host_time_s(self, op: Collective) -> float:
        """Host time to issue one collective (its kernels plus the framework's wrapper and NCCL enqueue)."""

    def collective_time_s(self, op: Collective, where: GroupPlacement) -> float:
        """Time of one collective over the placed group."""

    def copy_time_s(self, nbytes: float) -> float:
        """GPU time of one memory-bound copy kernel that reads and writes ``nbytes`` in all."""

    def optimizer_time_s(self, params: float) -> float:
        """Time of the optimizer step over ``params`` parameters held by one GPU."""

    def extrapolated(self) -> FrozenSet[str]:
        """Names of ops priced outside measured data (empty for analytical models)."""

    def notes(self) -> Tuple[str, ...]:
        """What the report should say about how this model priced the plan (empty for analytical models)."""
