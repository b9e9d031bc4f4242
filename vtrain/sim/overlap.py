"""A fused pair: the forward of one micro-batch and the whole backward of another run together, each
hiding the other's expert-parallel all-to-alls (DeepSeek-V3 report, Sec. 3.2.1, Fig. 4: attention and MLP
of one chunk overlap the dispatch and combine of the other; Megatron-Core's 1F1B A2A overlap).

Model: the pair's compute (its kernels and in-stream TP collectives) runs while the all-to-alls of both
passes proceed on their own stream; while the all-to-alls run, their kernels hold a share σ of the SMs
(:data:`vtrain.comm.ep.DISPATCH_SMS` / SMs), so the compute slows by that share for that long:
    T = max(A2A_F + A2A_B, compute_F + compute_B + σ·(A2A_F + A2A_B)).
The exposed all-to-all of the pair is T - compute. Without all-to-alls (a dense model) T is the sum of the
two passes. Host-bound excess of the two passes is kept.
"""
from __future__ import annotations

from vtrain.sim.launch import PassCost


def fused_pass(f: PassCost, b: PassCost, sm_share: float) -> PassCost:
    a2a = f.ep_comm_s + b.ep_comm_s
    compute = f.gpu_s + b.gpu_s - a2a
    t = max(a2a, compute + sm_share * a2a) if a2a > 0 else compute
    host_excess = f.host_excess_s + b.host_excess_s
    groups = tuple(x + y for x, y in zip(f.comm_by_group, b.comm_by_group))
    ep = len(groups) - 1  # the expert-parallel group: exposed = what the pair does not hide
    groups = tuple(t - compute if i == ep else g for i, g in enumerate(groups))
    latency = t + host_excess
    # the host resynchronises with the GPU at each layer boundary (launch.price_chunk), so a pass's host_s holds
    # its own GPU time: summed over the pair, that counts the time the two passes overlap twice. The pair's host
    # is done when its last layer is (latency), or when its own issuing is, if that is sooner
    return PassCost(gpu_compute_s=f.gpu_compute_s + b.gpu_compute_s, comm_s=t - (f.gpu_compute_s + b.gpu_compute_s),
                    latency_s=latency, host_s=min(f.host_s + b.host_s, latency), flops=f.flops + b.flops,
                    comm_by_group=groups, side_comm_s=f.side_comm_s + b.side_comm_s, side_tail_s=b.side_tail_s)
