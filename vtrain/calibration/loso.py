"""One calibration of every fitted end-to-end constant, cross-validated leave-one-source-out.

The constants (:data:`PARAMS`) are few and physical: a GPU architecture's share of its benchmarked GEMM rate
sustained inside a training step, the HBM efficiency of element-wise kernels (one for every GPU), a
software stack family's host time per launched kernel, the share of a fused forward/backward pair's
all-to-all that Megatron-Core's 1F1B all-to-all overlap hides, and NCCL's per-GPU all-to-all rate across nodes.
A constant is fitted only where at least two
training sources inform it (have rows it applies to); otherwise it keeps its config value (its provenance says
why).

Objective: the mean over training sources of each source's MAPE (each source weighted equally, so 180
single-node runs do not drown 10 published rows), minimised by Nelder-Mead (Nelder & Mead 1965) in the logit
of each constant's log-position inside its bounds. Each evaluation reads every row's iteration time off a
cached grid of exact simulations: each constant's log-range cut into ``GRID - 1`` equal steps, the time
interpolated multilinearly in log time over the (at most six) constants a row depends on (a host-bound
time is proportional to the host time, a GEMM-bound one to 1 / the sustained share: linear in log-log,
so the interpolation is exact away from the kink between the regimes). A constant of a mechanism a plan
switches on (``Param.plan_flag``: the overlap's share) is fitted after the shared ones, at their fitted values,
on the rows that switch it on (:func:`fit_switched`; several such constants by coordinate descent), so that
a handful of rows neither moves the shared
constants nor is drowned by their sources' other rows. Every figure reported is an exact simulation at the
fitted constants, never the surrogate.

Leave-one-source-out (LOSO): for each source, refit from the config values without its rows and predict them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from vtrain.calibration.sources import Source, ape_pct

# nodes per constant over its log-bounds (see the module docstring): 7 nodes, steps of 12% of the sustained share,
# 13% of the memory efficiency, 1.8x of the host time; a finer grid visits more nodes (each an exact simulation
# of ~10 ms on a large plan) for optima that move by less than the folds' spread
GRID = 7
# passes of coordinate descent over the constants a plan switches on (fit_switched), each at the others' latest values
SWITCHED_ROUNDS = 2
# a constant that moves a row's time by less than this (relative) across its whole range is inert for that row
# (a GPU-bound plan's host time): the row is interpolated over its other constants only
INERT = 1e-3
# a source informs a constant when the constant, moved across its whole range, moves the source's times by at least
# this much on average (|log| ratio): a source it barely moves leaves it flat, and a fit on that source alone would
# drift to a bound (the GPU-bound weak-scaling rows and the 2022 host time); ~5%, the spread of a source's residuals
INFORMS = 0.05


@dataclass(frozen=True)
class Param:
    """A fitted constant: a GpuSpec field of every GPU of the ``members`` architectures, or a StackSpec field of
    the ``members`` stacks, bounded by its plausible physical range."""

    key: str
    field: str
    on_gpu: bool
    members: Tuple[str, ...]
    lo: float
    hi: float
    # a mechanism a plan switches on: a ParallelPlan bool, or a name of SWITCHES; the constant applies where it is on
    plan_flag: str = ""
    on_tier: bool = False  # a field of the cluster's scale-out tier (cluster.inter_node), not of the GPU or stack

    def applies(self, w: Any) -> bool:
        gpu, stack = w.cluster.gpu, w.stack
        if self.plan_flag and not (SWITCHES[self.plan_flag](w) if self.plan_flag in SWITCHES
                                   else getattr(w.plan, self.plan_flag)):
            return False
        if self.on_tier:
            return bool(stack.name in self.members) and getattr(w.cluster.inter_node, self.field) is not None
        if not self.on_gpu:
            return bool(stack.name in self.members)
        if gpu.architecture not in self.members:
            return False
        # a stack whose GEMM curve was fitted on this architecture's runs runs at the curve (no sustained share)
        return self.field != "sustained_gemm_fraction" or not (
            stack.gemm_curve_fitted_on and gpu.architecture == stack.gemm_curve_fitted_on)

    def value_of(self, w: Any) -> float:
        holder = w.cluster.inter_node if self.on_tier else w.cluster.gpu if self.on_gpu else w.stack
        return float(getattr(holder, self.field))

    def from_unit(self, u: float) -> float:
        return float(np.exp(np.log(self.lo) + u * (np.log(self.hi) - np.log(self.lo))))

    def to_unit(self, v: float) -> float:
        return float((np.log(v) - np.log(self.lo)) / (np.log(self.hi) - np.log(self.lo)))


def nccl_a2a_across_nodes(w: Any) -> bool:
    """Whether a run's expert all-to-all is NCCL's and leaves the NVLink domain (the dispatcher Megatron-Core's
    MoEAlltoAllTokenDispatcher, an EP group spanning domains): where NCCL's per-GPU all-to-all ceiling
    (``cluster.inter_node.all_to_all_gb_per_s``, docs/moe.md) prices it."""
    from vtrain.comm.ep import ep_placement
    from vtrain.workload.enums import MoeDispatcher

    p = w.plan
    return bool(w.model.is_moe and p.ep > 1 and p.moe_dispatcher == MoeDispatcher.ALLTOALL
                and ep_placement(p, w.cluster.domain_size).nodes > 1)


# mechanisms a Param.plan_flag may name beside a ParallelPlan bool
SWITCHES: Dict[str, Callable[[Any], bool]] = {"nccl_a2a_across_nodes": nccl_a2a_across_nodes}

_GPUS = ("volta", "ampere", "hopper", "blackwell")
# eager PyTorch 1.x with apex (Megatron-DeepSpeed 2022, Megatron-LM 2020-21, DeepSpeed of that era); Megatron-Core
# with Transformer Engine's fused modules; eager PyTorch 2.x (torchtitan FSDP2, llm-foundry's Composer FSDP)
EAGER_2022 = ("megatron_deepspeed_2022", "megatron_lm_2021", "deepspeed")
MCORE_TE = ("megatron_core_te",)
EAGER_2X = ("torchtitan_fsdp2", "llm_foundry_fsdp")
# bounds: a GEMM inside a step sustains 50-100% of its benchmarked rate (the measured H200 steady/burst ratio is
# 0.83, profiles/measured/h200/sustained_gemm.csv); element-wise kernels reach 40-95% of HBM bandwidth (STREAM-like
# copies reach ~90%); a host issues a kernel in 5 us (CUDA launch + a fused C++ module) to 0.15 ms (eager Python
# with autograd; the lent H200's eager PyTorch 2.x issued each op in 26 us median, profiles/measured/h200/meta.json);
# Megatron-Core's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm) hides 0.1 to all of each fused pair's
# all-to-all (vtrain.sim.overlap; below 0.1 the dispatcher's SMs cost the pair more than it hides), fitted on the rows
# that switch it on
PARAMS: Tuple[Param, ...] = (
    *(Param(f"gpu:{a}.sustained_gemm_fraction", "sustained_gemm_fraction", True, (a,), 0.5, 1.0) for a in _GPUS),
    Param("gpu:all.memory_efficiency", "memory_efficiency", True, _GPUS, 0.4, 0.95),
    Param("stack:eager_2022.host_time_per_kernel_s", "host_time_per_kernel_s", False, EAGER_2022, 5e-6, 1.5e-4),
    Param("stack:megatron_core_te.host_time_per_kernel_s", "host_time_per_kernel_s", False, MCORE_TE, 5e-6, 1.5e-4),
    Param("stack:eager_2x.host_time_per_kernel_s", "host_time_per_kernel_s", False, EAGER_2X, 5e-6, 1.5e-4),
    Param("stack:megatron_core_te.ep_overlap_hidden_share", "ep_overlap_hidden_share", False, MCORE_TE, 0.1, 1.0,
          plan_flag="overlap_moe_comm"),
    # the combined 1F1B's host time per schedule-node call (vtrain.sim.schedule_nodes): 20 us (an event wait and
    # record and a stream switch) to 1 ms (a Python call with an autograd-engine run of its own), fitted on the rows
    # that switch the overlap on
    Param("stack:megatron_core_te.ep_overlap_node_host_s", "ep_overlap_node_host_s", False, MCORE_TE, 2e-5, 1e-3,
          plan_flag="overlap_moe_comm"),
    # NCCL's all-to-all across nodes per GPU: 10 GB/s (a fifth of a 400 Gb/s NIC share) to 100 GB/s (an 800 Gb/s
    # NIC's whole line): fitted on the rows whose NCCL expert all-to-all leaves the NVLink domain
    Param("cluster:inter_node.all_to_all_gb_per_s", "all_to_all_gb_per_s", False, MCORE_TE, 10.0, 100.0,
          plan_flag="nccl_a2a_across_nodes", on_tier=True),
)


def with_values(w: Any, params: Sequence[Param], values: Sequence[float]) -> Any:
    """``w`` with each applicable constant set (its GPU's and its stack's fields replaced)."""
    gpu: Dict[str, Any] = {}
    stack: Dict[str, Any] = {}
    tier: Dict[str, Any] = {}
    for p, v in zip(params, values):
        if p.applies(w):
            (tier if p.on_tier else gpu if p.on_gpu else stack)[p.field] = float(v)
    if not gpu and not stack and not tier:
        return w
    cluster = replace(w.cluster, gpu=replace(w.cluster.gpu, **gpu))
    if tier:  # the scale-out tier only where a tier constant applies: every other row keeps its tier object
        cluster = replace(cluster, inter_node=replace(w.cluster.inter_node, **tier))
    return replace(w, cluster=cluster, stack=replace(w.stack, **stack))


def simulate_s(w: Any) -> float:
    from vtrain.cost.analytical import AnalyticalCostModel
    from vtrain.sim.simulator import simulate_workload

    report, _ = simulate_workload(w, AnalyticalCostModel(w))
    return float(report.iteration_time_s)


def predict_s(workloads: Sequence[Any], params: Sequence[Param], values: Sequence[float]) -> np.ndarray:
    """Exact simulated iteration seconds of ``workloads`` at the constants."""
    return np.array([simulate_s(with_values(w, params, values)) for w in workloads])


class Surrogate:
    """Each fit row's log iteration time on the grid of the constants it depends on, simulated on first use
    and cached (shared by every fold: a fold only changes which rows and constants enter)."""

    def __init__(self, params: Sequence[Param], grid: int = GRID) -> None:
        self.params = tuple(params)
        self.grid = grid
        self.cache: Dict[Tuple[int, Tuple[Tuple[int, int], ...]], float] = {}
        self.rows: List[Any] = []
        self.row_id: Dict[int, int] = {}
        self.spread: Dict[Tuple[int, int], float] = {}

    def row(self, w: Any) -> int:
        k = self.row_id.get(id(w))
        if k is None:
            k = self.row_id[id(w)] = len(self.rows)
            self.rows.append(w)
        return k

    def node(self, k: int, nodes: Tuple[Tuple[int, int], ...]) -> float:
        got = self.cache.get((k, nodes))
        if got is None:
            ps = [self.params[i] for i, _ in nodes]
            vals = [self.params[i].from_unit(j / (self.grid - 1)) for i, j in nodes]
            got = self.cache[(k, nodes)] = float(np.log(simulate_s(with_values(self.rows[k], ps, vals))))
        return got

    def log_spread(self, k: int, i: int) -> float:
        """|log| of the ratio of row ``k``'s times at param ``i``'s two bounds (the others at the row's config
        values; 0 where the param does not apply)."""
        got = self.spread.get((k, i))
        if got is None:
            p = self.params[i]
            if not p.applies(self.rows[k]):
                got = 0.0
            else:
                ends = [simulate_s(with_values(self.rows[k], [p], [v])) for v in (p.lo, p.hi)]
                got = abs(float(np.log(ends[1] / ends[0])))
            self.spread[(k, i)] = got
        return got

    def moves(self, k: int, i: int) -> bool:
        """Whether param ``i`` moves row ``k``'s time by more than INERT across its bounds."""
        return bool(self.log_spread(k, i) > float(np.log1p(INERT)))

    def log_s(self, k: int, dims: Sequence[int], u: np.ndarray) -> float:
        """Multilinear interpolation of row ``k``'s log time at unit coordinates ``u`` (indexed by param) over
        the params ``dims``."""
        if not dims:
            return self.node(k, ())
        pos = [min(max(u[i], 0.0), 1.0) * (self.grid - 1) for i in dims]
        base = [min(int(p), self.grid - 2) for p in pos]
        frac = [p - b for p, b in zip(pos, base)]
        total = 0.0
        for corner in range(1 << len(dims)):
            weight = 1.0
            nodes = []
            for j, i in enumerate(dims):
                bit = (corner >> j) & 1
                weight *= frac[j] if bit else 1.0 - frac[j]
                nodes.append((i, base[j] + bit))
            if weight > 0.0:
                total += weight * self.node(k, tuple(nodes))
        return total


@dataclass(frozen=True)
class Fit:
    """Fitted constants (None: not fitted, config values kept) and the sources they were fitted on."""

    values: Tuple[Optional[float], ...]
    trained_on: Tuple[str, ...]
    evaluations: int
    informed_by: Tuple[Tuple[str, ...], ...] = ()  # per param, the sources that inform it (loso's full fit)

    def fitted(self, params: Sequence[Param]) -> Tuple[List[Param], List[float]]:
        pairs = [(p, v) for p, v in zip(params, self.values) if v is not None]
        return [p for p, _ in pairs], [v for _, v in pairs]


def informing(sources: Sequence[Source], surrogate: "Surrogate") -> List[List[str]]:
    """Per param, the sources it moves by >= INFORMS on average over their fit rows (0 for a row it does not
    apply to); a param a plan switches on (``plan_flag``), on average over the fit rows that switch it on (a
    source's few overlap rows inform the overlap's share however many rows run without it)."""
    out = []
    for i, p in enumerate(surrogate.params):
        names = []
        for s in sources:
            idx = [j for j in s.fit_index if not p.plan_flag or p.applies(s.workloads[int(j)])]
            spread = [surrogate.log_spread(surrogate.row(s.workloads[int(j)]), i) for j in idx]
            if spread and float(np.mean(spread)) >= INFORMS:
                names.append(s.name)
        out.append(names)
    return out


def prior_value(p: Param, sources: Sequence[Source]) -> float:
    """A param's config value: the median over the rows it applies to (members share one value)."""
    vals = [p.value_of(w) for s in sources for w in s.workloads if p.applies(w)]
    return float(np.median(vals)) if vals else float("nan")


def fit(sources: Sequence[Source], surrogate: Surrogate, max_evals: int = 600, min_sources: int = 2) -> Fit:
    """Fit the params informed by >= ``min_sources`` of ``sources``; the others stay None (config values)."""
    from scipy.optimize import minimize

    params = surrogate.params
    informed = informing(sources, surrogate)
    active = [i for i, names in enumerate(informed) if len(names) >= min_sources and not params[i].plan_flag]
    switched = [i for i, names in enumerate(informed) if len(names) >= min_sources and params[i].plan_flag]
    if not active:
        return Fit(tuple(None for _ in params), tuple(s.name for s in sources), 0)
    start = np.array([prior_value(params[i], sources) for i in active])
    x0 = np.array([np.log(u / (1 - u)) for u in np.clip([params[i].to_unit(v) for i, v in zip(active, start)],
                                                         0.05, 0.95)])
    plan = []  # per source: (fit row ids, their dims among active params, measured, rate)
    for s in sources:
        idx = s.fit_index
        ks = [surrogate.row(s.workloads[int(i)]) for i in idx]
        dims = [[i for i in active if params[i].applies(s.workloads[int(j)]) and surrogate.moves(k, i)]
                for j, k in zip(idx, ks)]
        plan.append((ks, dims, s.measured_s[idx], s.rate[idx]))
    evals = [0]

    def loss(x: np.ndarray) -> float:
        evals[0] += 1
        u = np.zeros(len(params))
        u[active] = 1.0 / (1.0 + np.exp(-x))
        total = 0.0
        for ks, dims, meas, rate in plan:
            pred = np.exp([surrogate.log_s(k, d, u) for k, d in zip(ks, dims)])
            total += float(np.mean(ape_pct(pred, meas, rate)))
        return total / len(plan)

    simplex = np.vstack([x0, x0 + 0.7 * np.eye(len(active))])  # ~15% of each log-range: a simplex that sees the data
    # converged when the simplex spans < 0.05 in logit (~1% of a log-range) and the loss < 0.01 point
    res = minimize(loss, x0, method="Nelder-Mead",
                   options={"maxfev": max_evals, "initial_simplex": simplex, "xatol": 0.05, "fatol": 0.01})
    values: List[Optional[float]] = [None] * len(params)
    u = np.zeros(len(params))
    for i, xi in zip(active, res.x):
        u[i] = float(1.0 / (1.0 + np.exp(-xi)))
        values[i] = params[i].from_unit(u[i])
    # the switched constants by coordinate descent, each at the others' latest values (a row with the overlap and a
    # cross-node all-to-all depends on three of them): SWITCHED_ROUNDS passes in order
    done: List[int] = []
    for _ in range(SWITCHED_ROUNDS if len(switched) > 1 else 1):
        for i in switched:
            u[i] = fit_switched(sources, surrogate, [*active, *(j for j in done if j != i)], i, u)
            values[i] = params[i].from_unit(u[i])
            done = done if i in done else [*done, i]
    return Fit(tuple(values), tuple(s.name for s in sources), evals[0])


def fit_switched(sources: Sequence[Source], surrogate: Surrogate, active: Sequence[int], i: int,
                 u: np.ndarray) -> float:
    """The unit position of param ``i``, one a plan switches on, at the fitted shared constants ``u``: the mean
    over sources of each source's MAPE over its fit rows that switch it on (each source weighted equally), by
    golden-section search over [0, 1] (30 steps: ~1e-6 of the range). Fitted after the shared constants, on the
    rows it applies to alone, so that it does not move their fit (a few rows of a source beside hundreds)."""
    p = surrogate.params[i]
    plan = []
    for s in sources:
        idx = [int(j) for j in s.fit_index if p.applies(s.workloads[int(j)])]
        ks = [surrogate.row(s.workloads[j]) for j in idx]
        dims = [[d for d in [*active, i] if surrogate.params[d].applies(s.workloads[j]) and surrogate.moves(k, d)]
                for j, k in zip(idx, ks)]
        if ks:
            plan.append((ks, dims, s.measured_s[idx], s.rate[idx]))

    def loss(x: float) -> float:
        at = u.copy()
        at[i] = x
        return float(np.mean([np.mean(ape_pct(np.exp([surrogate.log_s(k, d, at) for k, d in zip(ks, dims)]),
                                              meas, rate)) for ks, dims, meas, rate in plan]))

    g = (np.sqrt(5.0) - 1.0) / 2.0
    lo, hi = 0.0, 1.0
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(30):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class SourceResult:
    name: str
    n: int
    skipped: int
    shipped_ape: np.ndarray  # at the config values
    in_sample_ape: np.ndarray  # at the fit on every source
    loso_s: np.ndarray  # held-out predictions (fit without this source)
    loso_ape: np.ndarray
    fold: Fit
    in_sample_s: Optional[np.ndarray] = None  # in-sample predictions (fit on every source), for the ranking


def loso(sources: Sequence[Source], params: Sequence[Param] = PARAMS, max_evals: int = 600,
         grid: int = GRID, progress: Optional[Callable[[str], None]] = None) -> Tuple[Fit, List[SourceResult]]:
    """The fit on every source, and each source's in-sample and leave-one-source-out errors (``progress``
    is told each fit as it ends)."""
    surrogate = Surrogate(params, grid)
    full = fit(sources, surrogate, max_evals)
    full = replace(full, informed_by=tuple(tuple(n) for n in informing(sources, surrogate)))
    if progress is not None:
        progress(f"fitted on every source ({full.evaluations} evaluations, {len(surrogate.cache)} simulations)")
    out = []
    for s in sources:
        ps, vs = full.fitted(params)
        in_s = predict_s(s.workloads, ps, vs)
        fold = fit([t for t in sources if t.name != s.name], surrogate, max_evals)
        fp, fv = fold.fitted(params)
        held = predict_s(s.workloads, fp, fv)
        out.append(SourceResult(s.name, s.n, len(s.skipped), ape_pct(s.shipped_s, s.measured_s, s.rate),
                                ape_pct(in_s, s.measured_s, s.rate), held, ape_pct(held, s.measured_s, s.rate), fold,
                                in_s))
        if progress is not None:
            progress(f"held out {s.name}: MAPE {out[-1].loso_ape.mean():.2f}% ({len(surrogate.cache)} simulations)")
    return full, out
