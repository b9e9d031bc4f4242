"""Pipeline schedules as per-stage orders of passes, compiled to a flat DAG.

- GPipe (Huang et al. 2019): all forwards, then all backwards.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021, Fig. 4 top): stage s runs min(p-s-1, m) warm-up
  forwards, then alternates one forward and one backward, then drains the backwards.
- Interleaved 1F1B (Narayanan et al. SC'21, Fig. 4 bottom; Megatron-Core's
  ``forward_backward_pipelining_with_interleaving``): v model chunks per stage, warm-up
  (p-s-1)·2 + (v-1)·N chunk-forwards, the chunk order advancing every N micro-batches
  (``microbatch_group_size_per_vp_stage``, default N = p); with m not a multiple of N the last group holds
  the m mod N (>= p) left (Megatron-Core's ``get_schedule_table``).
- Zero-bubble ZB-H1 and ZB-V (Qi et al. 2024) and DualPipe / DualPipeV (DeepSeek-V3 report):
  :mod:`vtrain.sim.schedule_zb`. They split the backward pass into B (input gradient, on the critical
  path) and W (weight gradient, deferred into bubbles) and place chunks in a V or in two directions.

A task is (kind, chunk, micro-batch) with kind F=0, B=1, W=2 (W only when the schedule splits the
backward; otherwise B is the whole backward), or a fused pair (FUSED, f chunk, f mb, b chunk, b mb): a
forward and a whole backward of two micro-batches run together so that each hides the other's
communication (DualPipe's overlapped chunks, Megatron-Core's 1F1B A2A overlap). A fused pair depends on
two producers; it compiles to a zero-length wait on the backward's producer followed by the pair, so the
engine keeps one dependency per task.

Positions: a layout maps (stage, chunk) to a pipeline position q and cuts the positions into chains
(one per direction: DualPipe has two chains of p, every other schedule one chain of p·v). The forward of
q needs the forward of q-1 of its chain (after a p2p transfer, none when both sit on one stage); the
backward of q needs the backward of q+1, the chain's last position its own forward.

Orders are warm-up + steady units + cool-down; the units repeat every ``period_units`` (covering
``period_mbs`` micro-batches): the engine simulates a few periods and extrapolates the rest exactly
(:mod:`vtrain.sim.pipeline`). The compiled DAG records each task's unit and whether a cool-down task
reaches it (``tainted``). It depends only on (schedule, p, v, m, fused) and is cached.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from vtrain.errors import ConfigError
from vtrain.sim.schedule_zb import zb_period, zb_stage_order
from vtrain.sim.tasks import FUSED, B, F, StageOrder, Task, W
from vtrain.workload.chunks import TWO_CHUNKS, chunks_of, layout
from vtrain.workload.enums import Schedule

__all__ = ["B", "F", "FUSED", "W", "StageOrder", "Task", "chunks_of", "layout"]  # the task vocabulary, re-exported
SPLIT = (Schedule.ZERO_BUBBLE, Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV)  # B/W split


def splits_backward(schedule: Schedule) -> bool:
    return schedule in SPLIT


def check_schedule(schedule: Schedule, p: int, m: int) -> None:
    """The micro-batch and stage counts a schedule needs: DualPipe's own asserts (deepseek-ai/DualPipe
    dualpipe.py ``step``: num_ranks % 2 == 0, num_chunks % 2 == 0 and num_chunks >= 2 * num_ranks, each
    direction running half of the micro-batches; dualpipev.py: num_chunks >= 2 * num_ranks only, so an odd
    count schedules), ZB-V's 2p (PyTorch's ScheduleZBVZeroBubble: micro-batches >= its 2p stages)."""
    if schedule in TWO_CHUNKS:
        if schedule == Schedule.DUALPIPE and p % 2:
            raise ConfigError(f"parallelism.schedule=dualpipe needs an even pp, got pp={p} (DualPipe's step() "
                              "asserts num_ranks % 2 == 0)")
        if m < 2 * p or (schedule == Schedule.DUALPIPE and m % 2):
            raise ConfigError(f"parallelism.schedule=dualpipe needs an even number of micro-batches >= 2*pp="
                              f"{2 * p}, got {m} (DualPipe's step() asserts num_chunks % 2 == 0 and num_chunks >= "
                              "2 * num_ranks: each direction runs half)" if schedule == Schedule.DUALPIPE else
                              f"parallelism.schedule={schedule.value} needs micro-batches >= 2*pp={2 * p}, got {m}")


@lru_cache(maxsize=256)
def interleaved_table(m: int, v: int, group: int) -> Tuple[Tuple[int, int], ...]:
    """(chunk, micro-batch) of each virtual micro-batch id: groups of ``group`` micro-batches run chunk 0, then
    chunk 1, ...; the last group holds what is left (Megatron-Core's ``get_schedule_table``). A backward runs
    chunk v-1-c of the same entry (its ``get_model_chunk_id(forward=False)``)."""
    out: List[Tuple[int, int]] = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        out += [(c, i) for c in range(v) for i in range(lo, hi)]
    return tuple(out)


def _fuse(steady: Tuple[Tuple[Task, ...], ...]) -> Tuple[Tuple[Task, ...], ...]:
    """Each steady (forward, backward) pair as one fused task. The warm-up runs one forward more, so that a
    pair never holds the backward of its own forward (Megatron-Core's combined 1F1B schedule)."""
    return tuple(((FUSED, f[1], f[2], b[1], b[2]),) for f, b in steady)


def stage_order(schedule: Schedule, p: int, v: int, m: int, s: int, fused: bool = False,
                costs: Tuple[int, int, int] = (1, 1, 1), group: int = 0) -> StageOrder:
    """Stage ``s``'s task order; ``costs``: the F, B, W pass times ZB-V's greedy order is built on; ``group``:
    the interleaved schedule's micro-batches per chunk group (0: p)."""
    if schedule in SPLIT:
        return zb_stage_order(schedule, p, m, s, fused, costs)
    if schedule == Schedule.GPIPE:
        return StageOrder(tuple((0, 0, i) for i in range(m)), (), tuple((1, 0, i) for i in range(m)))
    if schedule == Schedule.ONE_F_ONE_B or v == 1:
        w = min(p - s - 1 + int(fused), m)
        steady: Tuple[Tuple[Task, ...], ...] = tuple(((0, 0, w + i), (1, 0, i)) for i in range(m - w))
        return StageOrder(tuple((0, 0, i) for i in range(w)), _fuse(steady) if fused else steady,
                          tuple((1, 0, i) for i in range(m - w, m)))
    total, n = m * v, group or p
    w = min(interleaved_warmup(p, v, s, n, fused), total)  # Megatron-Core's get_pp_rank_microbatches
    fwd = interleaved_table(m, v, n)
    bwd = [(v - 1 - c, i) for c, i in fwd]
    steady = tuple(((0, *fwd[w + k]), (1, *bwd[k])) for k in range(total - w))
    # units from the first forward of a shorter last group on do not repeat the period's pattern
    regular = len(steady) if m % n == 0 else min(len(steady), max(0, (m - m % n) * v - w))
    return StageOrder(tuple((0, c, i) for c, i in fwd[:w]), _fuse(steady) if fused else steady,
                      tuple((1, c, i) for c, i in bwd[total - w:]), regular)


def interleaved_warmup(p: int, v: int, s: int, group: int, fused: bool = False) -> int:
    """Chunk forwards before stage ``s``'s first backward: (p-s-1)·2 + (v-1)·N, one more with the fused
    1F1B pairs (Megatron-Core's get_pp_rank_microbatches, overlap_moe_expert_parallel_comm)."""
    return (p - s - 1) * 2 + (v - 1) * group + int(fused)


def peak_inflight_chunks(schedule: Schedule, p: int, v: int, m: int, s: int, group: int = 0,
                         fused: bool = False) -> int:
    """Model-chunk activations stage ``s`` holds at its peak: the forwards its order runs before its first
    backward frees one, plus the forward that precedes that backward (the steady unit's). 1F1B: p - s
    micro-batches (Narayanan et al. 2021, Sec. 2.2), ZB-H1 the same (Qi et al. 2024, Sec. 3.1); interleaved:
    (p-s-1)·2 + (v-1)·N + 1 chunks (Megatron-Core's warm-up count + 1); fused pairs run one forward more
    (Megatron-Core's combined 1F1B); GPipe all m. The two-chunk schedules hold chunk activations: ZB-V 2p
    (1F1B's memory, Qi et al. 2024 Sec. 6), DualPipe p + 1 stage copies and DualPipeV 2p + 1 chunks (DualPipe
    README, "Activation"), at most 2m."""
    if schedule == Schedule.GPIPE:
        return m
    if schedule in TWO_CHUNKS:
        return min({Schedule.ZBV: 2 * p, Schedule.DUALPIPE: p + 1, Schedule.DUALPIPEV: 2 * p + 1}[schedule], 2 * m)
    if schedule == Schedule.INTERLEAVED and v > 1:
        return min(interleaved_warmup(p, v, s, group or p, fused) + 1, m * v)
    return min(p - s + int(fused), m)


@lru_cache(maxsize=1024)
def peak_inflight_layers(p: int, v: int, m: int, s: int, chunk_layers: Tuple[int, ...], group: int = 0,
                         fused: bool = False) -> int:
    """Interleaved 1F1B with chunks of unequal depth (the embedding or loss slot, an explicit layout):
    the most layer activations stage ``s`` holds, walking its order (each forward adds its chunk's
    ``chunk_layers``, each backward frees them; the steady unit's forward runs before its backward frees).
    With equal chunks it is :func:`peak_inflight_chunks` x their layers."""
    n = group or p
    table = interleaved_table(m, v, n)
    total = m * v
    w = min(interleaved_warmup(p, v, s, n, fused), total)
    held = sum(chunk_layers[c] for c, _ in table[:w])
    peak = held
    for k in range(total - w):
        held += chunk_layers[table[w + k][0]]
        if held > peak:
            peak = held
        held -= chunk_layers[v - 1 - table[k][0]]
    return peak


def period(schedule: Schedule, p: int, v: int, group: int = 0) -> Optional[Tuple[int, int]]:
    """(micro-batches, steady units) per repeating period of the steady state (None: no repetition);
    ``group``: the interleaved schedule's micro-batch group (0: p)."""
    if schedule == Schedule.GPIPE:
        return None
    if schedule in SPLIT:
        return zb_period(schedule)
    if schedule == Schedule.INTERLEAVED and v > 1:
        n = group or p
        return n, n * v
    return 1, 1


def period_mbs(schedule: Schedule, p: int, v: int, group: int = 0) -> Optional[int]:
    """Micro-batches per repeating period of the steady state (None: the schedule does not repeat)."""
    per = period(schedule, p, v, group)
    return None if per is None else per[0]


@dataclass(frozen=True)
class CompiledSchedule:
    """A topologically sorted task list. Arrays are indexed by topological position.

    ``stage[i]``, ``dur_key[i]`` (index into the per-pass durations: stage·kinds·v + kind·v + chunk for
    F, B, W; fused pairs and the zero-length wait after them, see :func:`fused_key`), ``dep[i]``
    (topological index of the cross-stage dependency, -1 if none), ``lag_key[i]`` (index into the
    per-boundary p2p times: forward boundary into position q at 2q, backward boundary out of q+1 into q
    at 2q+1; -1 for none). ``last_bwd[s][c]`` is the topological index of the task that completes chunk
    c's last weight gradient on stage s. ``pairs[s][k]`` = topological indices of steady unit k's tasks
    on stage s; ``tainted[i]``: a cool-down task reaches task i (through dependencies or its stage's
    order).
    """

    p: int
    v: int
    m: int
    stage: Tuple[int, ...]
    dur_key: Tuple[int, ...]
    dep: Tuple[int, ...]
    lag_key: Tuple[int, ...]
    last_bwd: Tuple[Tuple[int, ...], ...]
    microbatch: Tuple[int, ...]
    pairs: Tuple[Tuple[Tuple[int, ...], ...], ...]
    tainted: Tuple[bool, ...]
    period_mbs: Optional[int]
    kinds: int = 2  # passes per (stage, chunk) in the duration layout: F, B (, W)
    period_units: int = 1
    kind: Tuple[int, ...] = ()  # per task: F, B, W, FUSED, or -1 for the wait before a fused pair
    clean_units: int = -1  # steady units before the first one a cool-down task reaches (all stages); -1: unset
    # the periodicity check's tasks (:func:`vtrain.sim.pipeline._periodic_window`): the last two clean periods,
    # as (tasks of the first, their counterparts one period later, per stage its [start, end) in both)
    window: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[Tuple[int, int], ...]]] = None
    window_start: int = 0  # the first task the check reads: the engine need not record the tasks before it


def fused_key(p: int, v: int, kinds: int, s: int, cf: int, cb: int) -> int:
    """Duration index of a fused pair (after the per-pass entries); the wait's key is fused_key(p, v, kinds,
    p, 0, 0) (one zero entry after all pairs)."""
    return p * kinds * v + (s * v + cf) * v + cb


def _deps(kind: int, c: int, i: int, s: int, pos: Tuple[Tuple[int, ...], ...], chain: int
          ) -> Tuple[Task, Optional[Task], int]:
    """(key of this pass, key of its cross-stage producer or None, lag key)."""
    q = pos[s][c]
    first, last = q % chain == 0, q % chain == chain - 1
    if kind == F:
        return (F, q, i), (None if first else (F, q - 1, i)), (-1 if first else 2 * q)
    if kind == B:
        return (B, q, i), ((F, q, i) if last else (B, q + 1, i)), (-1 if last else 2 * q + 1)
    return (W, q, i), None, -1


class _Topo:
    """The topological task list, built by letting each stage place the tasks of its order whose producers
    are placed (:meth:`advance`); arrays as :class:`CompiledSchedule`'s."""

    def __init__(self, orders: List[StageOrder], pos: Tuple[Tuple[int, ...], ...], chain: int, chunks: int,
                 kinds: int) -> None:
        p, self.pos, self.chain, self.chunks, self.kinds = len(orders), pos, chain, chunks, kinds
        self.wait_key = fused_key(p, self.chunks, kinds, p, 0, 0)
        self.seqs = [o.tasks() for o in orders]
        # a task from here on is "tainted" like the cool-down: the shorter last group's units do not repeat
        self.cool_start = [len(o.warmup) + sum(len(u) for u in (o.steady if o.regular < 0 else o.steady[:o.regular]))
                           for o in orders]
        self.done: Dict[Task, int] = {}  # (kind, q, mb) -> topological index
        self.ptr = [0] * p
        self.stage: List[int] = []
        self.dur_key: List[int] = []
        self.dep: List[int] = []
        self.lag_key: List[int] = []
        self.mbs: List[int] = []
        self.kind_of: List[int] = []
        self.tainted: List[bool] = []
        self.pos_of: List[List[int]] = [[0] * len(seq) for seq in self.seqs]  # stage-order position -> index
        self.waited = [False] * p  # the wait before the fused pair at ptr[s] is already placed
        self.wait_at: List[Dict[int, int]] = [{} for _ in range(p)]  # stage-order position -> its wait's index
        self.last_idx = [-1] * p  # topological index of the stage's last placed task

    def place(self, s: int, key: int, d: int, lag: int, mb: int, k: int, slot: bool) -> int:
        idx = len(self.stage)
        last, tainted = self.last_idx[s], self.tainted
        tainted.append(self.ptr[s] >= self.cool_start[s] or (last >= 0 and tainted[last]) or (d >= 0 and tainted[d]))
        self.last_idx[s] = idx
        if slot:
            self.pos_of[s][self.ptr[s]] = idx
        self.stage.append(s)
        self.dur_key.append(key)
        self.dep.append(d)
        self.lag_key.append(lag)
        self.mbs.append(mb)
        self.kind_of.append(k)
        return idx

    def _place_fused(self, s: int, task: Task) -> bool:
        """A fused pair: first a zero-length wait for the backward's input, then the pair once the forward's
        input is there (False: blocked)."""
        _, cf, mf, cb, mb = task
        done = self.done
        kf, need_f, lag_f = _deps(F, cf, mf, s, self.pos, self.chain)
        kb, need_b, lag_b = _deps(B, cb, mb, s, self.pos, self.chain)
        if not self.waited[s]:
            if need_b is not None and need_b not in done:
                return False
            wd = done[need_b] if need_b is not None else -1  # the wait holds the stage until the backward's input
            self.wait_at[s][self.ptr[s]] = self.place(s, self.wait_key, wd, lag_b, mb, -1, False)
            self.waited[s] = True
        if need_f is not None and need_f not in done:
            return False
        idx = self.place(s, fused_key(len(self.ptr), self.chunks, self.kinds, s, cf, cb),
                         done[need_f] if need_f else -1, lag_f, mf, FUSED, True)
        done[kf] = done[kb] = idx
        done[(W, kb[1], mb)] = idx
        self.waited[s] = False
        return True

    def advance(self, s: int) -> int:
        """Place stage ``s``'s next tasks until one waits for a producer not yet placed; how many it placed."""
        order, ptr, done = self.seqs[s], self.ptr, self.done
        start = ptr[s]
        while ptr[s] < len(order):
            task = order[ptr[s]]
            if task[0] == FUSED:
                if not self._place_fused(s, task):
                    break
            else:
                k, c, i = task
                key, need, lag = _deps(k, c, i, s, self.pos, self.chain)
                if need is not None and need not in done:
                    break
                d = done[need] if need is not None else -1
                done[key] = self.place(s, s * self.kinds * self.chunks + k * self.chunks + c, d, lag, i, k, True)
            ptr[s] += 1
        return ptr[s] - start

    def units(self, orders: List[StageOrder]) -> Tuple[Tuple[Tuple[int, ...], ...], ...]:
        """pairs[s][k]: the topological indices of stage s's steady unit k (a fused pair's wait with it)."""
        pairs_l: List[Tuple[Tuple[int, ...], ...]] = []
        for s, order in enumerate(orders):
            at, units, wait_at, pos_of = len(order.warmup), [], self.wait_at[s], self.pos_of[s]
            for unit in order.steady:
                units.append(tuple(i for j in range(len(unit)) for i in (
                    (wait_at[at + j], pos_of[at + j]) if at + j in wait_at else (pos_of[at + j],))))
                at += len(unit)
            pairs_l.append(tuple(units))
        return tuple(pairs_l)


@lru_cache(maxsize=512)
def compile_schedule(schedule: Schedule, p: int, v: int, m: int, fused: bool = False,
                     costs: Tuple[int, int, int] = (1, 1, 1), group: int = 0) -> CompiledSchedule:
    chunks = chunks_of(schedule, v)
    pos, chain = layout(schedule, p, v)
    split = splits_backward(schedule)
    group = group if schedule == Schedule.INTERLEAVED and chunks > 1 and group != p else 0  # the default: 0
    orders = [stage_order(schedule, p, chunks, m, s, fused, costs, group) for s in range(p)]
    topo = _Topo(orders, pos, chain, chunks, 3 if split else 2)
    remaining = sum(len(o) for o in topo.seqs)
    while remaining:
        placed = sum(topo.advance(s) for s in range(p))
        if not placed:  # pragma: no cover - would be a bug in stage_order
            raise RuntimeError(f"schedule {schedule} deadlocks for p={p} v={v} m={m}")
        remaining -= placed
    last_kind = W if split else B
    per_chain = m // 2 if schedule == Schedule.DUALPIPE else m
    last_bwd = tuple(tuple(topo.done[(last_kind, pos[s][c], per_chain - 1)] for c in range(chunks)) for s in range(p))
    pairs = topo.units(orders)
    per = period(schedule, p, chunks, group)
    tainted = topo.tainted
    clean = min((next((k for k, unit in enumerate(units) if any(tainted[i] for i in unit)), len(units))
                 for units in pairs), default=0)
    q = 1 if per is None else per[1]
    window = _window(pairs, clean, q) if per else None
    return CompiledSchedule(p, chunks, m, tuple(topo.stage), tuple(topo.dur_key), tuple(topo.dep),
                            tuple(topo.lag_key), last_bwd, tuple(topo.mbs), pairs, tuple(tainted),
                            None if per is None else per[0], topo.kinds, q, tuple(topo.kind_of), clean, window,
                            min(window[0]) if window and window[0] else 0)


def _window(pairs: Tuple[Tuple[Tuple[int, ...], ...], ...], clean: int, q: int
            ) -> Optional[Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[Tuple[int, int], ...]]]:
    """The tasks of the last two clean periods of steady units (``q`` units a period), stage by stage:
    None when fewer than two clean periods follow the first steady unit."""
    lo = clean - 2 * q
    if lo < 1:
        return None
    first: List[int] = []
    second: List[int] = []
    bounds = []
    for units in pairs:
        start = len(first)
        for k in range(lo, lo + q):
            for a, b in zip(units[k], units[k + q]):
                first.append(a)
                second.append(b)
        bounds.append((start, len(first)))
    return tuple(first), tuple(second), tuple(bounds)
