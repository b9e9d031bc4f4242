"""A fused pair: the forward of one micro-batch and the whole backward of another run together, each
hiding the other's expert-parallel all-to-alls (DeepSeek-V3 report, Sec. 3.2.1, Fig. 4: attention and MLP
of one chunk overlap the dispatch and combine of the other; Megatron-Core's 1F1B A2A overlap).

Model: a share η of the pair's all-to-all (``hidden_share``) runs on its own stream beside the pair's compute
(its kernels and in-stream TP collectives); while it runs, its kernels hold a share σ of the SMs
(:data:`vtrain.comm.ep.DISPATCH_SMS` / SMs), so the compute slows by that share for that long; the rest of the
all-to-all, (1 - η), runs exposed:
    T = max(η·A2A, compute_F + compute_B + σ·η·A2A) + (1 - η)·A2A,   A2A = A2A_F + A2A_B.
DualPipe's schedule hides all of it (η = 1). Megatron-Core's combined 1F1B hides the stack's
``ep_overlap_hidden_share``: its layer schedule (model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run)
pairs each all-to-all with one sub-module of the other micro-batch (combine-backward beside attention,
dispatch beside the MLP backward, dispatch-backward beside the MLP forward, combine beside the attention
backward), each waits for the sub-module that produces its tokens, the host waits for the dispatch's split
sizes before it issues the expert GEMMs, and the all-to-all stream has no priority over the GEMMs' CTAs; the
share is fitted on the rows of every source that run the overlap (task=calibrate calibrate.scope=all,
vtrain.calibration.loso; docs/moe.md).
The exposed all-to-all of the pair is T - compute. Without all-to-alls (a dense model) T is the sum of the
two passes. Host-bound excess of the two passes is kept; when the forward's dispatch makes the host wait for
the GPU (:mod:`vtrain.sim.host_sync`), a host that started early cannot hide it: the pair runs its latency
from the GPU's start, and its host is done when its own issuing is.
"""
from __future__ import annotations

from vtrain.sim.launch import NO_SYNC_S, PassCost


def fused_time_s(compute_s: float, a2a_s: float, sm_share: float, hidden_share: float = 1.0) -> float:
    """The pair's compute-stream time: the hidden share of the all-to-all beside the compute (slowed by the
    dispatcher's SM share while it runs), the rest after it."""
    if a2a_s <= 0.0:
        return compute_s
    hidden = hidden_share * a2a_s
    return max(hidden, compute_s + sm_share * hidden) + (a2a_s - hidden)


def fused_pass(f: PassCost, b: PassCost, sm_share: float, hidden_share: float = 1.0) -> PassCost:
    a2a = f.ep_comm_s + b.ep_comm_s
    compute = f.gpu_s + b.gpu_s - a2a
    t = fused_time_s(compute, a2a, sm_share, hidden_share)
    host_excess = f.host_excess_s + b.host_excess_s
    groups = tuple(x + y for x, y in zip(f.comm_by_group, b.comm_by_group))
    ep = len(groups) - 1  # the expert-parallel group: exposed = what the pair does not hide
    groups = tuple(t - compute if i == ep else g for i, g in enumerate(groups))
    latency = t + host_excess
    # the host resynchronises with the GPU at each layer boundary (launch.price_chunk), so a pass's host_s holds
    # its own GPU time: summed over the pair, that counts the time the two passes overlap twice. The pair's host
    # is done when its last layer is (latency), or when its own issuing is, if that is sooner
    host = min(f.host_s + b.host_s, latency)
    synced = f.sync_host_s != NO_SYNC_S or b.sync_host_s != NO_SYNC_S
    return PassCost(gpu_compute_s=f.gpu_compute_s + b.gpu_compute_s, comm_s=t - (f.gpu_compute_s + b.gpu_compute_s),
                    latency_s=latency, host_s=host, flops=f.flops + b.flops,
                    comm_by_group=groups, side_comm_s=f.side_comm_s + b.side_comm_s, side_tail_s=b.side_tail_s,
                    sync_lead_s=host_excess if synced else 0.0, sync_host_s=host if synced else NO_SYNC_S)
