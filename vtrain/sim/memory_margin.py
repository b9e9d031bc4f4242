"""The memory margin real runs need: the share of HBM a plan's predicted peak may use.

A run that fits on paper can still fail: PyTorch's caching allocator reserves more than it allocates
(fragmentation: torchtitan's measured reserved peaks are a median 1.10x vtrain's predicted peaks,
vtrain/data/modern_gpus/torchtitan_rows.csv), and NCCL's and CUDA graphs' buffers grow with the
communicators and captured graphs. ``cluster.usable_hbm_fraction`` (default
:data:`vtrain.workload.system.USABLE_HBM_FRACTION`, its source there) bounds the predicted peak; a search
prunes plans above it with the reason (:func:`margin_reason`), and ``task=simulate`` says when a plan
exceeds it (:func:`margin_line`). Pure functions of a peak and a cluster.
"""
from __future__ import annotations

from typing import Optional

from vtrain.workload.system import GIB, ClusterSpec

FIELD = "cluster.usable_hbm_fraction"


def usable_bytes(cluster: ClusterSpec) -> float:
    """The memory per GPU a plan may use: the margin's share of the GPU's HBM."""
    return cluster.gpu.hbm_capacity_bytes * cluster.usable_hbm_fraction


def exceeds_margin(peak_bytes: float, cluster: ClusterSpec) -> bool:
    """Whether a predicted peak is above the usable share of HBM."""
    return peak_bytes > usable_bytes(cluster)


def margin_reason(peak_bytes: float, cluster: ClusterSpec, bound: bool = False) -> str:
    """The one-line reason a search prunes a plan above the margin (``bound``: the peak is a lower bound)."""
    cap_gib = cluster.gpu.hbm_capacity_bytes / GIB
    what = "at least " if bound else ""
    return (f"does not fit memory: {what}{peak_bytes / GIB:.1f} GiB per GPU > {usable_bytes(cluster) / GIB:.1f} GiB "
            f"usable ({cluster.usable_hbm_fraction:.0%} of {cap_gib:.1f} GiB, {FIELD})")


def margin_line(peak_bytes: float, capacity_bytes: float, fraction: float) -> Optional[str]:
    """For ``task=simulate``: a line when the peak fits the HBM (``capacity_bytes``) but not its usable share
    ``fraction`` (None otherwise)."""
    usable = capacity_bytes * fraction
    if peak_bytes <= usable or peak_bytes > capacity_bytes:
        return None
    return (f"memory margin: the peak {peak_bytes / GIB:.1f} GiB exceeds the usable {usable / GIB:.1f} GiB "
            f"({FIELD}={fraction:g} of {capacity_bytes / GIB:.1f} GiB): real runs this full risk running out of "
            "memory (allocator fragmentation, NCCL and CUDA-graph buffers); a search prunes this plan")
