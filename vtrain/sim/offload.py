"""Activation offloading as Megatron-Core runs it (``--cpu-offloading --cpu-offloading-num-layers n``, activations
only, as Megatron-Bridge's performance presets set it): Transformer Engine's ``get_cpu_offload_context`` copies the
tensors each of the first n layers saves for backward to pinned host memory after that layer's forward and back
before its backward, on one copy stream beside the compute stream (TE transformer_engine/pytorch/cpu_offload.py,
OffloadSynchronizer's default schedule).

Timing (one micro-batch, L layers of forward time f each, a copy of c per layer on the serial copy stream): the
copy of layer i starts after its forward and must end before layer L - n + i's forward starts, where the compute
stream waits on it and frees the GPU copy; the reload of layer i starts with the backward of layer L - 1 - n + i
and must end before layer i's backward. The copies queue, so the compute stream first waits when the n copies
outlast the L - 1 layers of compute that they run beside: the stall per pass is max(0, n c - (L - 1) f), the
backward's with the backward's f. The copy engines' share of HBM bandwidth (a 3.6 GB layer in ~16 ms against
8 TB/s) is not priced.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Tuple

from vtrain.sim.launch import PassCost
from vtrain.sim.memory import layer_activation_bytes
from vtrain.sim.stage_costs import StageCosts
from vtrain.workload.system import GB
from vtrain.workload.workload import Workload


def offload_copy_s(w: Workload) -> float:
    """Time to copy the offloaded layers' saved activations of one micro-batch one way (the n layers' bytes over
    the GPU's host link, ``gpu.host_link_gb_per_s``); 0 without offloading."""
    n, link = w.plan.offload_layers, w.cluster.gpu.host_link_gb_per_s
    if not n or link is None:
        return 0.0
    per_layer = layer_activation_bytes(w.model, w.plan, keeps_unread=w.stack.sac_keeps_unread)
    return n * per_layer / (link * GB)


def _stalled(c: PassCost, copy_s: float, layers: int) -> PassCost:
    """The pass with the compute stream's wait on the copy stream (module docstring) added to its GPU time."""
    window_s = c.gpu_s * (layers - 1) / layers
    stall_s = max(0.0, copy_s - window_s)
    return replace(c, gpu_compute_s=c.gpu_compute_s + stall_s) if stall_s > 0.0 else c


def with_offload(sc: StageCosts, w: Workload) -> StageCosts:
    """Each forward and backward pass stalled by its exposed copies (pp=1: one stage, one chunk)."""
    copy_s = offload_copy_s(w)
    if copy_s <= 0.0:
        return sc
    layers = w.model.num_layers

    def rows(passes: Tuple[Tuple[PassCost, ...], ...]) -> Tuple[Tuple[PassCost, ...], ...]:
        return tuple(tuple(_stalled(c, copy_s, layers) for c in row) for row in passes)

    return replace(sc, forward=rows(sc.forward), backward=rows(sc.backward))
