"""Schedules that split the backward pass into B (input gradient) and W (weight gradient).

- ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 3.1): 1F1B's memory (p - s micro-batches
  in flight on stage s) with W passes delayed to fill the cool-down. Stage s runs p-1-s forwards, then s
  (F, B) pairs, then steady (F_x, B_{x-(p-1-s)}, W_{x-(p-1)}) triples, then p-1-s (B, W) pairs and s W's.
  Bubble on uniform stages: (p-1)(F + B - W) (paper, Table 2).
- ZB-V (Qi et al. 2024, Sec. 6): two chunks per stage in a V (chunk 0 at position s, chunk 1 at 2p-1-s),
  B/W split, memory of 1F1B (2p chunk activations in flight). Built here by a greedy rule on unit pass
  times (B first, deeper chunk first, then F within the memory limit, else a pending W). On uniform
  stages with F = B = W (per chunk) its bubble is (p-1)·F: the last stage's fill, half of ZB-H1's
  (p-1)(F_stage + B_stage - W_stage) at the same memory, as the paper's Fig. 8 shows; the tests check it.
  It does not repeat in periods the extrapolation can use, so it runs in full (bounded by MAX_TASKS). Where
  the memory limit would deadlock it (some pass-time ratios on few stages), it is lifted for one step.
- DualPipe (DeepSeek-V3 report, Sec. 3.2.1; deepseek-ai/DualPipe dualpipe.py, the 8 steps of ``step``):
  micro-batches enter from both ends; rank r holds stage r of direction 0 and stage p-1-r of direction 1
  (two model copies); the steady step overlaps a forward chunk of one direction with a whole backward chunk
  of the other (fused pairs). Bubble (p/2-1)(F&B + B - 3W) (DualPipe README; B a whole backward), which the
  event simulation reproduces exactly with F = B_input = W.
- DualPipeV (DualPipe "cut in half", deepseek-ai/DualPipe dualpipev.py): one model copy in a V, the same
  8 steps with p ranks of 2 chunks; bubble (p-1)(F&B + B - 3W) in chunk passes, reproduced likewise.

W passes of deferred B's run in FIFO order (DualPipe's WeightGradStore).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Deque, List, Optional, Tuple

from vtrain.sim.tasks import FUSED, B, F, StageOrder, Task, W
from vtrain.workload.enums import Schedule


def zb_period(schedule: Schedule) -> Optional[Tuple[int, int]]:
    """(micro-batches, steady units) per period; ZB-V runs in full."""
    return {Schedule.ZERO_BUBBLE: (1, 1), Schedule.DUALPIPE: (2, 1), Schedule.DUALPIPEV: (1, 1)}.get(schedule)


def zb_stage_order(schedule: Schedule, p: int, m: int, s: int, fused: bool,
                   costs: Tuple[int, int, int] = (1, 1, 1)) -> StageOrder:
    if schedule == Schedule.ZERO_BUBBLE:
        return _zb_h1(p, m, s)
    if schedule == Schedule.ZBV:
        return StageOrder(_zb_v(p, m, costs)[s], (), ())
    return _dualpipe(p, m, s, v_shape=schedule == Schedule.DUALPIPEV)


def _zb_h1(p: int, m: int, s: int) -> StageOrder:
    w = min(p - 1 - s, m)
    lag = min(s, m - w)  # B passes whose W waits: W_{x-(p-1)} after B_{x-(p-1-s)}
    warm: List[Task] = [(F, 0, i) for i in range(w)]
    for k in range(lag):
        warm += [(F, 0, w + k), (B, 0, k)]
    steady = tuple(((F, 0, w + k), (B, 0, k), (W, 0, k - lag)) for k in range(lag, m - w))
    cool: List[Task] = []
    for j in range(m - w, m):
        cool += [(B, 0, j), (W, 0, j - lag)]
    cool += [(W, 0, j) for j in range(m - lag, m)]
    return StageOrder(tuple(warm), steady, tuple(cool))


def zbv_costs(f_s: float, b_s: float, w_s: float) -> Tuple[int, int, int]:
    """The pass times ZB-V's greedy order is built on: F, B and W in half-forward units (F = 2), as the
    zero-bubble implementation builds its V schedule from profiled F/B/W costs (sail-sg/zero-bubble-pipeline-
    parallelism, v_schedule.PipelineGraph(f_cost, b_cost, w_cost)): a B that carries full recompute is about
    twice a forward, and an order built for F = B = W would stall on it. Rounded so that plans of similar
    ratios share one compiled schedule."""
    if f_s <= 0:
        return (1, 1, 1)
    return (2, max(1, min(16, round(2 * b_s / f_s))), max(1, min(16, round(2 * w_s / f_s))))


@lru_cache(maxsize=64)
def _zb_v(p: int, m: int, costs: Tuple[int, int, int] = (1, 1, 1)) -> Tuple[Tuple[Task, ...], ...]:
    """Greedy V schedule on the pass times ``costs`` (F, B, W in time units; see the module doc and
    :func:`zbv_costs`). Its bubble on uniform stages with F = B = W is the pipeline fill of the last stage,
    (p-1) chunk forwards, the least any schedule of this layout has."""
    from collections import deque

    pos = [(s, 2 * p - 1 - s) for s in range(p)]
    done: dict[Tuple[int, int, int], int] = {}  # (kind, q, mb) -> finish time
    nxt_f = [[0, 0] for _ in range(p)]
    nxt_b = [[0, 0] for _ in range(p)]
    pending: List[Deque[Tuple[int, int]]] = [deque() for _ in range(p)]
    inflight = [0] * p
    orders: List[List[Task]] = [[] for _ in range(p)]
    busy = [0] * p
    total, t, placed, relax = 6 * p * m, 0, 0, False
    limit = total * (sum(costs) + 1)  # every task placed one after another, with slack: past it, a bug
    while placed < total:
        if t > limit:
            raise RuntimeError(f"ZB-V's greedy order did not finish for p={p} m={m} costs={costs}")
        picked, lifted = False, relax
        for s in range(p):
            if busy[s] > t:
                continue
            pick: Optional[Task] = None
            for c in (1, 0):  # B: deeper chunk first (it frees memory and feeds the chain)
                i, q = nxt_b[s][c], pos[s][c]
                need = (F, q, i) if q == 2 * p - 1 else (B, q + 1, i)
                if i < m and done.get((F, q, i), t + 1) <= t and done.get(need, t + 1) <= t:
                    pick = (B, c, i)
                    break
            if pick is None and (inflight[s] < 2 * p or relax):
                for c in (1, 0):
                    i, q = nxt_f[s][c], pos[s][c]
                    if i < m and (q == 0 or done.get((F, q - 1, i), t + 1) <= t):
                        pick = (F, c, i)
                        break
            if pick is None and pending[s]:
                c, i = pending[s].popleft()
                pick = (W, c, i)
            if pick is None:
                continue
            k, c, i = pick
            q = pos[s][c]
            done[(k, q, i)] = t + costs[k]
            orders[s].append(pick)
            busy[s] = t + costs[k]
            picked, placed, relax = True, placed + 1, False
            if k == F:
                nxt_f[s][c] += 1
                inflight[s] += 1
            elif k == B:
                nxt_b[s][c] += 1
                inflight[s] -= 1
                pending[s].append((c, i))
        # every stage idle and none could start: the memory limit holds forwards a B needs (a stage full of
        # chunk-0 forwards waits on its own chunk-1 forward). Lift it for one step, the only way on; an
        # order that never stalls is unchanged, and 2p in flight is its memory (sim/memory.inflight_layers)
        relax = not picked and not lifted and all(b <= t for b in busy)
        if not relax:
            t += 1
    return tuple(tuple(o) for o in orders)


def _dualpipe(p: int, m: int, r: int, v_shape: bool) -> StageOrder:
    """The 8 steps of DualPipe(V).step for rank r, as tasks of chunks (DualPipe: chunk = direction)."""
    if v_shape:
        ranks, hr, mbs, middle, flip = p, r, m, r == p - 1, 0
    else:
        ranks, hr, mbs = p // 2, min(r, p - 1 - r), m // 2
        middle, flip = r in (p // 2 - 1, p // 2), int(r >= p // 2)
    nf, nb = [0, 0], [0, 0]
    queue: List[Tuple[int, int]] = []
    out: List[Task] = []

    def fwd(phase: int) -> None:
        c = phase ^ flip
        out.append((F, c, nf[c]))
        nf[c] += 1

    def bwd(phase: int, zb: bool) -> None:  # zb: W deferred to the queue, else run right after B
        c = phase ^ flip
        out.append((B, c, nb[c]))
        if zb:
            queue.append((c, nb[c]))
        else:
            out.append((W, c, nb[c]))
        nb[c] += 1

    def weight() -> None:
        c, i = queue.pop(0)
        out.append((W, c, i))

    def fused(phase_f: int, phase_b: int) -> None:
        cf, cb = phase_f ^ flip, phase_b ^ flip
        out.append((FUSED, cf, nf[cf], cb, nb[cb]))
        nf[cf] += 1
        nb[cb] += 1

    for _ in range((ranks - hr - 1) * 2):  # step 1: nF0
        fwd(0)
    for _ in range(hr + 1):  # step 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(ranks - hr - 1):  # step 3: nB1W1F1
        bwd(1, True)
        weight()
        fwd(1)
    steps4 = mbs - 2 * ranks + hr + 1
    units: List[Tuple[Task, ...]] = []
    for i in range(steps4):  # step 4 (main): nF0B1F1B0, forward and backward chunks overlapped
        start = len(out)
        if i == 0 and middle:  # not overlapped, to shorten the bubble (dualpipe.py)
            fwd(0)
            bwd(1, False)
        else:
            fused(0, 1)
        fused(1, 0)
        if i > 0:
            units.append(tuple(out[start:]))
            del out[start:]
    head = len(out)
    cool: List[Task] = []
    for _ in range(ranks - hr - 1):  # step 5: nB1F1B0
        bwd(1, False)
        fused(1, 0)
    zb = False
    for i in range(hr + 1):  # step 6: nB1B0, the second half with zero bubble
        if i == (hr + 1) // 2 and hr % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == (hr + 1) // 2 and hr % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(ranks - hr - 1):  # step 7: nWB0
        weight()
        bwd(0, True)
    for _ in range(hr + 1):  # step 8: nW
        weight()
    cool = out[head:]
    return StageOrder(tuple(out[:head]), tuple(units), tuple(cool))
