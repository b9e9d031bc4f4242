"""A pass with a host synchronisation: how far a host that started early can run ahead of a busy GPU.

Megatron-Core's dropless token dispatch needs the received row counts on the host before it sizes its buffers:
the all-to-all dispatcher copies the split sizes to the host and waits for the stream
(``MoEAlltoAllTokenDispatcher.preprocess``: ``cuda_sync_point = "before_ep_alltoall"``,
``_maybe_dtoh_and_synchronize``), DeepEP's normal dispatch makes the CPU wait for the receive counts
(``num_recv_tokens_per_expert_list``), once per MoE layer in every forward (and recomputed forward); an eager
host-to-device copy does the same (:mod:`vtrain.graph.eager_paths`: every SYNC marker of the launch queue). The host
that reaches that point waits until the GPU has run everything queued before it, the previous pass's kernels
included. So the host cannot run ahead of the GPU across passes beyond the first sync of the next pass, and
what the host issues after it (the dispatch, the experts' grouped GEMMs, the combine: host-bound when the
GEMMs are small) is exposed on every pass, however far ahead the host was: the pass ends at
g0 + gpu_s + sync_lead_s at the earliest, and the host is free for the next pass no earlier than
g0 + sync_host_s (:class:`vtrain.sim.launch.PassCost`, :func:`vtrain.sim.engine.run_pipeline`).

Both come from the same launch queue that prices the pass (:func:`vtrain.sim.launch.price_chunk`), run with
the GPU busy until 0 and the host far ahead: ops before the first sync run back to back on the GPU; at the sync
the host waits for the GPU and from there the queue runs as priced (the host resynchronising at each layer
boundary). A pass without a sync keeps 0 and ``NO_SYNC_S``: a host ahead of the GPU hides its excess, as before.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence, Tuple

from vtrain.sim.launch import SYNC, Part, PassCost, PrefixMemo, _LaunchQueue, _run_part, price_chunk

_FAR_AHEAD_S = -1e20  # the host's start in the lead run: before anything the GPU does


def _has_sync(timed: Sequence[Tuple[float, float, float, float, int]]) -> bool:
    return any(t[4] == SYNC for t in timed)


def sync_lead(parts: Sequence[Part]) -> Optional[Tuple[float, float]]:
    """(end on the GPU, host free time) of the parts run from a GPU busy until 0 with the host far ahead, or
    None without a host sync in them (the host then stays ahead: nothing to add)."""
    if not any(_has_sync(timed) for timed, _, _ in parts):
        return None
    q = _LaunchQueue(_FAR_AHEAD_S)
    q.gpu = 0.0
    synced = False
    for timed, repeat, side in parts:
        if synced:
            _run_part(q, timed, repeat, side)
            continue
        if not _has_sync(timed):  # no sync yet: the host stays ahead, the GPU runs the layers back to back
            for _ in range(repeat):
                q.run(timed, side)
            continue
        q.run(timed, side)  # the first layer with a sync: no resynchronisation before it
        synced = True
        if repeat > 1:
            _run_part(q, timed, repeat - 1, side)
    return max(q.gpu, 0.0), q.host


def price_pass(parts: Sequence[Part], host_start_s: float, memo: Optional[PrefixMemo] = None) -> PassCost:
    """:func:`vtrain.sim.launch.price_chunk` with the pass's host-sync lead (module docstring)."""
    cost = price_chunk(parts, host_start_s, memo)
    lead = sync_lead(parts)
    if lead is None:
        return cost
    end_s, host_s = lead
    return replace(cost, sync_lead_s=max(0.0, end_s - cost.gpu_s), sync_host_s=host_s)
