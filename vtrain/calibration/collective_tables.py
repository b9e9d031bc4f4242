"""Fit the collective model of one NVLink fabric (:func:`vtrain.cost.collectives.tier_time_s`) to XLA's
measured collective table; read the nccl-tests / MLENG tables used to cross-check it.

Data (``vtrain/data/modern_gpus``, provenance in its README): ``xla_collective_perf_table.csv`` (8xH100,
8xB200, GB200/GB300 NVL72: all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute; F32;
groups of 2..72; 1 KiB..32 GiB; ``tensor_size_bytes`` is the full buffer: the reduce-scatter input, the
all-gather output), ``mleng_collective_bandwidth.csv`` (8xH200 and B200 sweeps, NVLS on/off, 4-node
runs), ``nccl_tests_h100_2x8_a3mega_allreduce.csv`` (2 nodes x 8 H100) and ``mleng_p2p_bandwidth.csv``.

Fit: per collective kind, least squares on log(predicted / measured time) with a robust soft-L1 loss
at 10% (the small-message rows scatter by that much: median of 20 runs, a few runs at 3-10x), every
group size and message size at once. The low-latency protocol is kept slower in bandwidth and faster
in latency than Simple (its constants are fitted as fractions of Simple's), as in NCCL.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy.optimize import least_squares  # type: ignore[import-untyped]

from vtrain.calibration.gemm_tables import DATA

XLA_TABLE = "xla_collective_perf_table.csv"
OPCODES = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
           "all-to-all": "all_to_all", "collective-permute": "p2p"}
FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0, "p2p": 1.0}
P2P_PATTERNS = ("one_way_half", "ring_shift_by_1")  # every rank sends to one peer (pipeline-like)


@dataclass(frozen=True)
class CollTable:
    gpu: str
    kind: str
    n: np.ndarray  # group size
    size: np.ndarray  # bytes (full buffer)
    time_s: np.ndarray

    def where(self, mask: np.ndarray) -> "CollTable":
        return replace(self, n=self.n[mask], size=self.size[mask], time_s=self.time_s[mask])


def read_xla_table(gpu: str, kind: str, folder: Optional[Path] = None) -> CollTable:
    """Rows of ``gpu`` (H100 | B200 | GB200 | GB300) for ``kind`` (vtrain name); rows without a time dropped."""
    n, size, t = [], [], []
    with ((folder or DATA) / XLA_TABLE).open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["gpu"] != gpu or OPCODES.get(r["opcode"]) != kind or not r["network_throughput_bytes_per_s_raw"]:
                continue
            if kind == "p2p":
                if not r["permute_pattern_derived"].startswith(P2P_PATTERNS):
                    continue
                n.append(2.0)  # one sender, one receiver per pair
            else:
                n.append(float(r["group_size"]))
            size.append(float(r["tensor_size_bytes_derived"]))
            t.append(float(r["tensor_size_bytes_derived"]) / float(r["network_throughput_bytes_per_s_raw"]))
    return CollTable(gpu, kind, np.asarray(n), np.asarray(size), np.asarray(t))


@dataclass(frozen=True)
class KindParams:
    """One kind's constants on one tier (the NetworkTier fields of that kind)."""

    latency_s: float
    step_latency_s: float
    efficiency: float
    group_exponent: float = 1.0
    ll_latency_s: float = 0.0
    ll_efficiency: float = 0.0
    nvls_latency_s: float = 0.0
    nvls_efficiency: float = 0.0


def predict_s(p: KindParams, t: CollTable, link_bytes_per_s: float, kind: str) -> np.ndarray:
    """:func:`vtrain.cost.collectives.tier_time_s`, vectorized (tests check it against the scalar one)."""
    f = FACTOR[kind]
    n = t.n
    if kind == "p2p":  # one send/recv of the whole buffer (collectives._p2p_s)
        steps, vol = 0.0 * n, t.size
    else:
        steps = f * (n - 1) * p.step_latency_s
        vol = f * ((n - 1) / n) ** p.group_exponent * t.size
    out = p.latency_s + steps + vol / (link_bytes_per_s * p.efficiency)
    if p.ll_efficiency > 0:
        out = np.minimum(out, p.ll_latency_s + steps + vol / (link_bytes_per_s * p.ll_efficiency))
    if kind == "all_reduce" and p.nvls_efficiency > 0:
        out = np.minimum(out, p.nvls_latency_s + t.size / (link_bytes_per_s * p.nvls_efficiency))
    return out


def errors_pct(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(pred / meas - 1.0) * 100, dtype=float)


def _unpack(x: Sequence[float], kind: str, ll: bool, nvls: bool, steps: bool) -> KindParams:
    a, e = x[0] * 1e-6, x[1]
    i = 2
    s = 0.0
    if steps:
        s, i = x[i] * 1e-6, i + 1
    q = x[i] if kind != "p2p" else 1.0
    i += 1 if kind != "p2p" else 0
    a_ll = e_ll = a_n = e_n = 0.0
    if ll:
        a_ll, e_ll, i = a * x[i], e * x[i + 1], i + 2
    if nvls and kind == "all_reduce":
        a_n, e_n = x[i] * 1e-6, x[i + 1]
    return KindParams(a, s, e, q, a_ll, e_ll, a_n, e_n)


def fit_kind(t: CollTable, link_bytes_per_s: float, ll: bool = True, nvls: bool = False) -> KindParams:
    """Fit one kind: Simple (latency, step latency, efficiency, group exponent) [+ LL] [+ NVLS]."""
    steps = t.kind != "p2p"
    x0: List[float] = [30.0, 0.7]
    lo: List[float] = [0.0, 0.05]
    hi: List[float] = [1000.0, 1.0]
    if steps:
        x0, lo, hi = x0 + [1.0], lo + [0.0], hi + [50.0]
    if t.kind != "p2p":
        x0, lo, hi = x0 + [0.9], lo + [0.0], hi + [1.0]
    if ll:
        x0, lo, hi = x0 + [0.4, 0.4], lo + [0.0, 0.01], hi + [1.0, 1.0]
    if nvls and t.kind == "all_reduce":
        x0, lo, hi = x0 + [50.0, 0.5], lo + [0.0, 0.05], hi + [1000.0, 1.0]

    def res(x: np.ndarray) -> np.ndarray:
        p = _unpack(list(x), t.kind, ll, nvls, steps)
        return np.asarray(np.log(predict_s(p, t, link_bytes_per_s, t.kind) / t.time_s), dtype=float)

    r = least_squares(res, np.asarray(x0), bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    return _unpack(r.x, t.kind, ll, nvls, steps)


def leave_one_out_pct(t: CollTable, link_bytes_per_s: float, by: str, nvls: bool) -> np.ndarray:
    """Held-out errors: refit without each group size (``by='n'``) or each of 4 interleaved size folds."""
    if by == "n":
        keys = t.n
    else:  # every 4th message size held out together
        keys = (np.unique(np.log2(t.size).round(), return_inverse=True)[1] % 4).astype(float)
    folds = list(np.unique(keys))
    errs = []
    for v in folds:
        train, test = t.where(keys != v), t.where(keys == v)
        if len(test.time_s) == 0 or len(train.time_s) < 8:
            continue
        p = fit_kind(train, link_bytes_per_s, nvls=nvls)
        errs.append(errors_pct(predict_s(p, test, link_bytes_per_s, t.kind), test.time_s))
    return np.concatenate(errs)


# --- cross-check tables ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MlengRow:
    record_id: str
    gpu: str
    num_gpus: int
    num_nodes: int
    op: str
    size_bytes: float
    algbw_gb_per_s: float
    algo: str
    nvls: str

    @property
    def time_s(self) -> float:
        return self.size_bytes / (self.algbw_gb_per_s * 1e9)


def read_mleng_collectives(folder: Optional[Path] = None) -> List[MlengRow]:
    out = []
    with ((folder or DATA) / "mleng_collective_bandwidth.csv").open(newline="") as fh:
        for r in csv.DictReader(fh):
            algbw = r["algbw_GBps"] or r["algbw_GBps_derived"]
            if not algbw:
                continue
            out.append(MlengRow(r["record_id"], r["gpu"], int(r["num_gpus"]), int(r["num_nodes"]), r["op"],
                                float(r["size_bytes"]), float(algbw), r["nccl_algo"], r["nvls_setting"]))
    return out


def read_a3mega(folder: Optional[Path] = None) -> CollTable:
    """2 nodes x 8 H100 all-reduce (nccl-tests, out-of-place time), as a table of n=16 rows."""
    size, t = [], []
    with ((folder or DATA) / "nccl_tests_h100_2x8_a3mega_allreduce.csv").open(newline="") as fh:
        for r in csv.DictReader(fh):
            size.append(float(r["size_bytes"]))
            t.append(float(r["oop_time_us"]) * 1e-6)
    s = np.asarray(size)
    return CollTable("H100x2", "all_reduce", np.full(len(s), 16.0), s, np.asarray(t))


def read_p2p_bandwidth(folder: Optional[Path] = None) -> Dict[str, float]:
    """GPU -> median off-diagonal unidirectional P2P write bandwidth (GB/s) of p2pBandwidthLatencyTest."""
    vals: Dict[str, List[float]] = {}
    with ((folder or DATA) / "mleng_p2p_bandwidth.csv").open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["tool"].startswith("CUDA samples") and r["src_device"] != r["dst_device"]:
                vals.setdefault(r["gpu"].split()[0], []).append(float(r["bandwidth_GBps"]))
    return {g: float(np.median(v)) for g, v in vals.items()}


def median_p90(e: np.ndarray) -> str:
    return f"median {np.median(e):5.1f}%  p90 {np.percentile(e, 90):5.1f}%  (n={len(e)})"


def tier_fields(params: Dict[str, KindParams]) -> Dict[str, object]:
    """NetworkTier YAML fields for fitted kinds (the all-reduce's as the scalar defaults)."""
    kinds = [k for k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p") if k in params]
    ar = params.get("all_reduce")

    def r(x: float) -> float:
        return float(f"{x:.4g}")
    out: Dict[str, object] = {
        "kind_latency_s": {k: r(params[k].latency_s) for k in kinds},
        "kind_step_latency_s": {k: r(params[k].step_latency_s) for k in kinds if k != "p2p"},
        "kind_efficiency": {k: r(params[k].efficiency) for k in kinds},
        "kind_group_exponent": {k: r(params[k].group_exponent) for k in kinds if k != "p2p"},
        "ll_latency_s": {k: r(params[k].ll_latency_s) for k in kinds if params[k].ll_efficiency > 0},
        "ll_efficiency": {k: r(params[k].ll_efficiency) for k in kinds if params[k].ll_efficiency > 0},
    }
    if ar is not None:
        out.update(latency_s=r(ar.latency_s), step_latency_s=r(ar.step_latency_s), efficiency=r(ar.efficiency),
                   nvls_latency_s=r(ar.nvls_latency_s), nvls_efficiency=r(ar.nvls_efficiency))
    return out
