"""Time collectives with torch.distributed on the GPUs of one machine (one process per GPU).

all-reduce, all-gather, reduce-scatter (full per-GPU buffer ``bytes``, as the simulator's Collective)
and send/recv between ranks 0 and 1, over sizes from 1 MiB up to ``max_mib`` (powers of two); warm-up,
CUDA synchronisation, median and p10/p90 over repeats (the max over ranks of each repeat).
Needs >= 2 CUDA devices and NCCL; :func:`profile_collectives` says why it skipped otherwise.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from vtrain.profiler.timing import quantile

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "p2p")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sizes(max_mib: int) -> List[int]:
    out, s = [], 2**20
    while s <= max_mib * 2**20:
        out.append(s)
        s *= 2
    return out


def _time_size(dist: Any, rank: int, world: int, dev: torch.device, nbytes: int, warmup: int, repeats: int
               ) -> List[Dict[str, Any]]:
    n = nbytes // 2  # bf16 elements
    full = torch.randn(n, device=dev, dtype=torch.bfloat16)
    shard = torch.randn(n // world, device=dev, dtype=torch.bfloat16)

    def p2p() -> None:
        if rank == 0:
            dist.send(full, 1)
        elif rank == 1:
            dist.recv(full, 0)

    ops = {"all_reduce": lambda: dist.all_reduce(full),
           "all_gather": lambda: dist.all_gather_into_tensor(full, shard),
           "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, full),
           "p2p": p2p}
    rows: List[Dict[str, Any]] = []
    for kind, fn in ops.items():
        times: List[float] = []
        for i in range(warmup + repeats):
            dist.barrier()
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(dev)
            dt = torch.tensor([time.perf_counter() - t0], device=dev)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # a collective ends when its slowest rank does
            if i >= warmup:
                times.append(float(dt))
        if rank == 0:
            rows.append({"kind": kind, "group_size": 2 if kind == "p2p" else world, "nodes": 1,
                         "bytes": float(nbytes), "samples": len(times), "median_s": quantile(times, 0.5),
                         "p10_s": quantile(times, 0.1), "p90_s": quantile(times, 0.9),
                         "source": "torch.distributed/nccl"})
    return rows


def _worker(rank: int, world: int, port: int, max_mib: int, warmup: int, repeats: int, out: str) -> None:
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dev = torch.device("cuda", rank)
    rows: List[Dict[str, Any]] = []
    for nbytes in _sizes(max_mib):
        rows += _time_size(dist, rank, world, dev, nbytes, warmup, repeats)
    if rank == 0:
        import json

        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def profile_collectives(max_mib: int = 256, warmup: int = 3, repeats: int = 10,
                        world: Optional[int] = None) -> Tuple[List[Dict[str, Any]], str]:
    """(rows, message). Spawns one process per visible GPU; skips with a reason when < 2 GPUs."""
    import json

    import torch.distributed as dist
    import torch.multiprocessing as mp

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = world or n
    if world < 2:
        return [], f"collectives: skipped ({n} CUDA device(s) visible; torch.distributed timing needs >= 2)"
    if not dist.is_available() or not dist.is_nccl_available():
        return [], "collectives: skipped (torch.distributed with NCCL is not available in this torch build)"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "collectives.json")
        mp.spawn(_worker, args=(world, _free_port(), max_mib, warmup, repeats, out), nprocs=world, join=True)
        rows = json.loads(Path(out).read_text())
    return rows, f"collectives: {len(rows)} rows timed on {world} GPUs"
