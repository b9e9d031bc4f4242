"""Timing: warm-up, device synchronisation, repeated runs, median and spread (p10/p90).

CPU: a clock around each call -- ``cpu`` (the process's CPU time, ``time.process_time``: on a shared
machine it does not count the time other processes hold the core; with one torch thread it equals
the op's run time) or ``wall`` (``perf_counter``). An op is sampled until ``repeats`` samples *and*
``min_total_s`` of run time are collected, so microsecond ops get enough samples.
CUDA: each sample first queues ``torch.cuda._sleep`` so the GPU is busy while the host issues the
op; the CUDA events around the op then measure GPU time only, and ``perf_counter`` around the call
measures the host's issue time (``host_s``), which the simulator's host model needs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from statistics import median
from typing import Callable, Dict, List, Tuple

import torch

SLEEP_CYCLES = 2_000_000  # about 1 ms of GPU spin: longer than the host needs to issue one op


@dataclass(frozen=True, slots=True)
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    samples: int
    host_s: float  # median host time to issue the call (CPU: equal to the run time)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative noise of the samples."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else 0.0


def quantile(xs: List[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(times: List[float], host: List[float]) -> Timing:
    return Timing(median(times), quantile(times, 0.1), quantile(times, 0.9), len(times), median(host))


CLOCKS: Dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def cpu_clock(name: str) -> Callable[[], float]:
    if name not in CLOCKS:
        raise ValueError(f"clock {name!r} is not one of {', '.join(CLOCKS)}")
    return CLOCKS[name]


_FLUSH: Dict[str, torch.Tensor] = {}


def flush_cpu_cache(nbytes: int = 48 * 2**20) -> None:
    """Evict the CPU caches (write a buffer larger than the last-level cache), outside the timing."""
    buf = _FLUSH.get("buf")
    if buf is None or buf.numel() * 4 < nbytes:
        buf = _FLUSH["buf"] = torch.empty(nbytes // 4, dtype=torch.float32)
    buf.fill_(1.0)


def time_op(fn: Callable[[], object], dev: torch.device, warmup: int = 3, repeats: int = 10,
            min_total_s: float = 0.0, max_samples: int = 1000, clock: str = "wall", cold: bool = False) -> Timing:
    """Time one op: GPU time with CUDA events (GPU kept busy), or wall time on CPU."""
    for _ in range(max(1, warmup)):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        events = []
        host: List[float] = []
        for _ in range(repeats):
            torch.cuda._sleep(SLEEP_CYCLES)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(dev)
        return summarize([s.elapsed_time(e) / 1e3 for s, e in events], host)
    now = cpu_clock(clock)
    times: List[float] = []
    total = 0.0
    while len(times) < repeats or (total < min_total_s and len(times) < max_samples):
        if cold:
            flush_cpu_cache()
        t0 = now()
        fn()
        dt = now() - t0
        times.append(dt)
        total += dt
    return summarize(times, times)


def time_step(fn: Callable[[], object], dev: torch.device, warmup: int, repeats: int, clock: str = "wall"
              ) -> Tuple[Timing, Timing]:
    """Time a whole step (a training iteration), synchronising around each run.

    Returns (timing by ``clock``, timing by wall clock); on CUDA both are wall clock."""
    for _ in range(warmup):
        fn()
    now = cpu_clock(clock) if dev.type == "cpu" else time.perf_counter
    times: List[float] = []
    walls: List[float] = []
    for _ in range(repeats):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0, w0 = now(), time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append(now() - t0)
        walls.append(time.perf_counter() - w0)
    return summarize(times, times), summarize(walls, walls)
