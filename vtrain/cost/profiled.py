"""Profile-driven cost model: look up measured operator times, interpolate between measured shapes,
fall back to the analytical model outside them and report which ops were extrapolated.

Look-up only: loading and checking profile files is :mod:`vtrain.cost.profile_io`; measuring them is
:mod:`vtrain.profiler` (torch). This module holds plain tables and never imports torch.

Interpolation is log-log, per (op name, variant): GEMMs and fused attention by FLOPs, memory-bound
ops by bytes, the Adam step by parameters, collectives by message bytes per (kind, group size,
nodes). An exact shape match (same m, n, k, batch, or same bytes) returns the measured median.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Set, Tuple

from vtrain.comm.placement import GroupPlacement
from vtrain.cost.base import CostModel
from vtrain.graph.ops import Collective, ComputeOp, FlashAttention, Gemm
from vtrain.workload.model import ModelSpec

ADAM = "adam"
_REL_TOL = 1e-6  # a query this close to a measured x counts as measured


@dataclass(frozen=True, slots=True)
class OpSample:
    """One measured operator (one row of ops.csv). Times in seconds; spread as p10/p90."""

    op: str  # graph op name, e.g. "qkv", "qkv.wgrad", "norm1.bwd", "flash_attn", "adam"
    variant: str  # implementation variant (see op_variant): "layernorm", "bias", "dropout", ...
    dtype: str
    m: int
    n: int
    k: int
    batch: int
    flops: float
    bytes: float
    params: float
    median_s: float
    p10_s: float
    p90_s: float
    host_s: float
    samples: int
    shape: Mapping[str, int] = field(default_factory=dict)  # sweep point (micro_batch, seq_len, ...)


@dataclass(frozen=True, slots=True)
class CollectiveSample:
    """One measured collective (one row of collectives.csv): ``bytes`` is the full per-GPU buffer."""

    kind: str  # all_reduce | all_gather | reduce_scatter | p2p
    group_size: int
    nodes: int
    bytes: float
    median_s: float
    p10_s: float
    p90_s: float
    source: str


@dataclass(frozen=True, slots=True)
class ProfileMeta:
    path: str  # the profile directory (for messages)
    device: str  # cpu | cuda
    device_name: str
    gpu: str  # gpu/ config name this profile stands for
    dtype: str
    host_included: bool  # op times include the host's issue time (CPU): host_time_s is 0
    host_time_per_kernel_s: float  # GPU profiles: measured host issue time per kernel
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProfileTable:
    meta: ProfileMeta
    ops: Tuple[OpSample, ...]
    collectives: Tuple[CollectiveSample, ...] = ()
    # a GEMM's steady rate back to back over its burst rate, measured on the same device at the profile's dtype
    # (sustained_gemm.csv, vtrain/profiler/sustained_gemm.py); None: no such table, op times used as measured
    sustained_fraction: Optional[float] = None


def op_variant(name: str, model: Optional[ModelSpec]) -> str:
    """The model features that change how an op named ``name`` is implemented (profile key part).

    Op names come from :mod:`vtrain.graph.builder`; the variant separates, e.g., a LayerNorm from an
    RMSNorm ``norm1`` and a biased from an unbiased ``qkv``. ``""`` when nothing else matters.
    """
    if model is None:
        return ""
    base = name.split(".")[0]
    if base in ("norm1", "norm2", "final_norm"):
        return str(model.norm.value)
    if base in ("qkv", "proj", "fc1", "fc2") and not name.endswith(".dgrad"):
        return "bias" if model.use_bias else "nobias"
    if base in ("residual1", "residual2", "flash_attn"):
        return "dropout" if model.dropout > 0 else "nodropout"
    if base == "embedding":
        pos = "learned" if str(model.position_embedding.value) == "learned" else "nopos"
        return pos + ("+dropout" if model.dropout > 0 else "")
    return ""


class Curve:
    """Measured (x, t) points of one op kind; log-log interpolation inside the measured range."""

    def __init__(self, points: Iterable[Tuple[float, float]]) -> None:
        by_x: Dict[float, List[float]] = {}
        for x, t in points:
            if x > 0 and t > 0:
                by_x.setdefault(float(x), []).append(float(t))
        self.xs: List[float] = sorted(by_x)
        self.ts: List[float] = [median(by_x[x]) for x in self.xs]

    def __len__(self) -> int:
        return len(self.xs)

    def at(self, x: float) -> Optional[float]:
        """Interpolated time at ``x``, or None outside [min x, max x]."""
        xs, ts = self.xs, self.ts
        if not xs or x <= 0 or x < xs[0] * (1 - _REL_TOL) or x > xs[-1] * (1 + _REL_TOL):
            return None
        i = bisect_left(xs, x)
        if i < len(xs) and abs(xs[i] - x) <= _REL_TOL * x:
            return ts[i]
        if i > 0 and abs(xs[i - 1] - x) <= _REL_TOL * x:
            return ts[i - 1]
        x0, x1, t0, t1 = xs[i - 1], xs[i], ts[i - 1], ts[i]
        w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))


def op_x(op: ComputeOp) -> float:
    """The size coordinate an op's time is interpolated over."""
    return op.flops if isinstance(op, (Gemm, FlashAttention)) else float(op.bytes)


def sample_x(s: OpSample) -> float:
    if s.op == ADAM:
        return s.params
    return s.flops if s.flops > 0 else s.bytes


def exact_key(op: ComputeOp) -> Tuple[float, ...]:
    if isinstance(op, Gemm):
        return (op.m, op.n, op.k, op.batch)
    if isinstance(op, FlashAttention):
        return (op.batch_heads, op.seq_len, op.head_dim)
    return (round(float(op.bytes)),)


def sample_exact_key(s: OpSample) -> Tuple[float, ...]:
    if s.op.startswith("flash_attn"):
        return (s.batch, s.m, s.k)
    if s.m > 0:
        return (s.m, s.n, s.k, s.batch)
    return (round(s.bytes),)


class ProfiledCostModel:
    """A :class:`~vtrain.cost.base.CostModel` over a measured :class:`ProfileTable`.

    ``host_time_s``: a CPU profile's op times already contain the host's work (one thread issues and
    runs every op), so it is 0; a GPU profile times kernels with CUDA events while the GPU is kept
    busy, and ``host_time_s`` is the profile's measured issue time per kernel (meta.json).
    """

    name = "profile"

    def __init__(self, profile: ProfileTable, fallback: CostModel, model: Optional[ModelSpec] = None,
                 precision: Optional[str] = None) -> None:
        from vtrain.errors import ProfileError

        if precision is not None and precision != profile.meta.dtype:
            raise ProfileError(f"{profile.meta.path}: profile dtype {profile.meta.dtype} does not match "
                               f"training.precision={precision}")
        self.profile = profile
        self.fallback = fallback
        self.model = model
        self._exact: Dict[Tuple[str, str, Tuple[float, ...]], List[float]] = {}
        points: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
        for s in profile.ops:
            variant = s.variant if model is not None else ""
            points.setdefault((s.op, variant), []).append((sample_x(s), s.median_s))
            self._exact.setdefault((s.op, variant, sample_exact_key(s)), []).append(s.median_s)
        self._curves = {key: Curve(p) for key, p in points.items()}
        cpoints: Dict[Tuple[str, int, int], List[Tuple[float, float]]] = {}
        for c in profile.collectives:
            cpoints.setdefault((c.kind, c.group_size, c.nodes), []).append((c.bytes, c.median_s))
        self._coll = {key: Curve(p) for key, p in cpoints.items()}
        self._extrapolated: Set[str] = set()
        self._cache: Dict[Any, float] = {}

    def _variant(self, name: str) -> str:
        return op_variant(name, self.model)

    def lookup(self, op: ComputeOp) -> Optional[float]:
        """The measured or interpolated time of ``op``, or None when the profile does not cover it."""
        variant = self._variant(op.name)
        exact = self._exact.get((op.name, variant, exact_key(op)))
        if exact:
            return median(exact)
        curve = self._curves.get((op.name, variant))
        return curve.at(op_x(op)) if curve is not None else None

    def compute_time_s(self, op: ComputeOp) -> float:
        """The measured time; a tensor-core op's (GEMM, fused attention) over the profile's sustained fraction,
        since it was timed in a burst at the boost clock and a step runs it at the power-capped clock."""
        hit = self._cache.get(op)
        if hit is not None:
            return hit
        t = self.lookup(op)
        if t is None:
            self._extrapolated.add(op.name)
            t = self.fallback.compute_time_s(op)
        elif self.profile.sustained_fraction is not None and isinstance(op, (Gemm, FlashAttention)):
            t /= self.profile.sustained_fraction
        self._cache[op] = t
        return t

    def host_time_s(self, kernels: float) -> float:
        meta = self.profile.meta
        return 0.0 if meta.host_included else kernels * meta.host_time_per_kernel_s

    def kernels_of(self, op: ComputeOp) -> float:
        return float(op.kernels)  # the profile measured the framework's own kernels

    def collective_host_time_s(self, op: Collective) -> float:
        return self.host_time_s(op.kernels)

    def collective_time_s(self, op: Collective, where: GroupPlacement) -> float:
        """Measured table for (kind, group size, nodes) when one exists; the analytical network model
        otherwise (out of a table's byte range: reported as extrapolated; no table: not reported,
        since single-device profiles do not claim collectives)."""
        if where.size <= 1 or op.bytes <= 0:
            return 0.0
        curve = self._coll.get((op.kind.value, where.size, where.nodes))
        if curve is not None:
            t = curve.at(op.bytes)
            if t is not None:
                return t
            self._extrapolated.add(op.name)
        return self.fallback.collective_time_s(op, where)

    def copy_time_s(self, nbytes: float) -> float:
        return self.fallback.copy_time_s(nbytes)

    def optimizer_time_s(self, params: float) -> float:
        curve = self._curves.get((ADAM, ""))
        t = curve.at(params) if curve is not None else None
        if t is None:
            self._extrapolated.add(ADAM)
            return self.fallback.optimizer_time_s(params)
        return t

    def extrapolated(self) -> FrozenSet[str]:
        return frozenset(self._extrapolated)

    def notes(self) -> Tuple[str, ...]:
        f = self.profile.sustained_fraction
        if f is None:
            return ()
        return (f"profile {self.profile.meta.path}: GEMM and fused-attention times / {f:.3f}, the sustained rate "
                "its sustained_gemm.csv measured (a step runs at the power-capped clock, the ops were timed in "
                "bursts)",)

