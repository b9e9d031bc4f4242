"""The share of per-tensor FP8's GEMM efficiency that a block-scaled (MXFP8) GEMM reaches on Blackwell
(``gpu.block_scaled_gemm_ratio``), fitted on measured pairs of two sources, cross-validated leave-one-source-out.

No table in vtrain/data times a block-scaled GEMM alone; two sources time the same job in two precisions on the
same GPUs, so the measured step ratio is free of everything the two runs share (communication, the bf16 / FP8
rate, power limits):

- ``torchtitan``: bf16 and MXFP8 (torchao's casts, :mod:`vtrain.graph.torchao_mx`) of dense models on B200 and
  GB200 (vtrain/data/modern_gpus/torchtitan_rows.csv);
- ``megatron_bridge``: per-tensor FP8 (FP8-CS) and MXFP8 (Transformer Engine's casts, :mod:`vtrain.graph.te_quant`)
  of one plan on B200, GB200 and GB300 (vtrain/data/published_runs/, its Megatron-Bridge tables).

The bf16 / FP8 partner does not depend on the ratio; the MXFP8 time falls as it grows. The ratio minimises the
mean over sources of each source's mean squared log error of the predicted step ratio (each source weighted
equally). Fitted on the dense pairs; held out: the MoE pairs (their expert load and dispatch are modelled
apart) and torchtitan's NVFP4 pairs (the ratio transferred: NVFP4 runs on the same block-scaled tensor cores).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from datetime import date
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vtrain.calibration.yaml_write import provenance_path, update_yaml
from vtrain.config.build import gpu_spec
from vtrain.config.compose import CONF_DIR, compose, load_gpu_config, load_stack_config
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.errors import ConfigError
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset, shipped_defaults
from vtrain.validation.published import SOURCE_COLUMN, pasted_row
from vtrain.validation.run import measured_ms, simulate_row

FITTED = ("b200", "gb200", "gb300")  # GPUs with pairs (sm_100 / sm_103: the same MX tensor cores)
WRITTEN = ("b200", "gb200", "b300", "gb300")  # the Blackwell configs that ship the ratio (B300: transferred)
TORCHTITAN, BRIDGE = "torchtitan", "megatron_bridge"
_TT_KEY = ("table", "model", "gpu", "num_gpus", "micro_batch", "global_batch", "seq_len", "stack", "recompute")
_MB_KEY = (SOURCE_COLUMN, "model", "gpu", "num_gpus", "tp", "pp", "cp", "ep", "virtual_stages", "micro_batch",
           "global_batch", "seq_len")


@dataclass(frozen=True)
class Pair:
    """One job measured twice: ``ref`` (bf16 or per-tensor FP8, ratio-free) and ``low`` (block-scaled), each
    (row, simulated workload, measured ms)."""

    source: str
    ref: Tuple[MeasuredRow, Any, float]
    low: Tuple[MeasuredRow, Any, float]

    @property
    def dense(self) -> bool:
        return bool(self.low[1].model.num_experts == 0)

    @property
    def label(self) -> str:
        r, rr = self.low[0], self.ref[0]
        rows = f"rows {rr.get('row_id') or rr.index}/{r.get('row_id') or r.index}"
        return f"{self.source} {r.get('gpu')} {r.get('model')} {rr.get('precision')}->{r.get('precision')} ({rows})"


def shipped_ratio() -> float:
    """The ratio the B200 config ships."""
    return float(gpu_spec(load_gpu_config("b200")).block_scaled_gemm_ratio)


def predicted_ms(w: Any, ratio: float, field: str = "block_scaled_gemm_ratio") -> float:
    """The workload's simulated iteration time (ms) with ``ratio`` as its GPU's ``field``."""
    w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, **{field: ratio})))
    return float(simulate_workload(w, AnalyticalCostModel(w))[0].iteration_time_s * 1e3)


def pair_error(pair: Any, ratio: float, field: str) -> float:
    """log(predicted / measured) of a pair's step-time ratio (low / ref; each a (row, workload, measured ms)) with
    ``ratio`` as the GPU's ``field``: the fits of vtrain.calibration.block_scaled and .rowwise_kernel."""
    (_, wr, mr), (_, wl, ml) = pair.ref, pair.low
    return math.log((predicted_ms(wl, ratio, field) / predicted_ms(wr, ratio, field)) / (ml / mr))


def error(pair: Pair, ratio: float) -> float:
    """log(predicted / measured) of the pair's step-time ratio (low / ref)."""
    return pair_error(pair, ratio, "block_scaled_gemm_ratio")


def _torchtitan_pairs() -> List[Pair]:
    cfg = compose(["+cluster=h100x1024"], require=False)
    load_gpu = functools.lru_cache(None)(load_gpu_config)
    rows = [r for r in read_measurements(resolve_dataset("torchtitan")) if str(r.get("gpu")) in FITTED]

    def sim(row: MeasuredRow) -> Tuple[MeasuredRow, Any, float]:
        w, _, _ = simulate_row(row, cfg, load_gpu, load_stack_config, shipped_defaults("torchtitan"), None)
        return row, w, measured_ms(row, w)[0]

    bf16 = {tuple(str(r.get(k)) for k in _TT_KEY): r for r in rows if r.get("precision") == "bf16"}
    return [Pair(TORCHTITAN, sim(bf16[key]), sim(r)) for r in rows if r.get("precision") in ("mxfp8", "nvfp4")
            for key in [tuple(str(r.get(k)) for k in _TT_KEY)] if key in bf16]


def _bridge_kind(row: MeasuredRow) -> Optional[str]:
    """'mxfp8' / 'fp8' (per-tensor) as the tables spell them (MXFP8, FP8-MX; FP8, FP8-CS), else None."""
    p = str(row.get("precision")).upper()
    return "mxfp8" if "MX" in p else ("fp8" if p.startswith("FP8") and "BLOCK" not in p else None)


def _bridge_pairs() -> List[Pair]:
    """Megatron-Bridge rows of one plan in per-tensor FP8 and MXFP8 (rows the validator cannot simulate left out)."""
    cfg = compose(["+cluster=h100x1024"], require=False)
    load_gpu = functools.lru_cache(None)(load_gpu_config)
    sims: Dict[Tuple[str, ...], Dict[str, Tuple[MeasuredRow, Any, float]]] = {}
    for raw in read_measurements(resolve_dataset("published_runs")):
        if not str(raw.get(SOURCE_COLUMN) or "").startswith(BRIDGE):
            continue
        try:
            row, _ = pasted_row(raw)
            kind = _bridge_kind(row)
            if kind is None or str(row.get("gpu")) not in FITTED:
                continue
            w, _, _ = simulate_row(row, cfg, load_gpu, load_stack_config, None, None)
        except ConfigError:
            continue
        sims.setdefault(tuple(str(row.get(k)) for k in _MB_KEY), {})[kind] = (row, w, measured_ms(row, w)[0])
    return [Pair(BRIDGE, v["fp8"], v["mxfp8"]) for v in sims.values() if "fp8" in v and "mxfp8" in v]


def load_pairs() -> List[Pair]:
    """Every pair of both sources (fitted: the dense MXFP8 ones, :func:`fitted_pairs`)."""
    return _torchtitan_pairs() + _bridge_pairs()


def fitted_pairs(pairs: Sequence[Pair]) -> List[Pair]:
    """The dense MXFP8 pairs (the fit's); MoE and NVFP4 pairs are held out."""
    return [p for p in pairs if p.dense and p.low[1].plan.precision.value == "mxfp8"]


def loss(pairs: Sequence[Pair], ratio: float) -> float:
    """Mean over sources of each source's mean squared log error (sources weighted equally)."""
    by: Dict[str, List[float]] = {}
    for p in pairs:
        by.setdefault(p.source, []).append(error(p, ratio) ** 2)
    return sum(sum(v) / len(v) for v in by.values()) / max(1, len(by))


def fit(pairs: Sequence[Any], lo: float = 0.3, hi: float = 1.0,
        loss_fn: Callable[[Sequence[Any], float], float] = loss) -> float:
    """The ratio in [lo, hi] minimising ``loss_fn`` (:func:`loss`; golden-section search, 30 steps: ~1e-6 of the
    range)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss_fn(pairs, a), loss_fn(pairs, b)
    for _ in range(30):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss_fn(pairs, a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss_fn(pairs, b)
    return min(1.0, (lo + hi) / 2)


def leave_one_source_out(pairs: Sequence[Pair]) -> Dict[str, float]:
    """Per source: the ratio fitted on the other source's pairs alone (predicting this source's out of sample)."""
    sources = sorted({p.source for p in pairs})
    return {s: fit([p for p in pairs if p.source != s]) for s in sources if len(sources) > 1}


def mean_abs_pct(pairs: Sequence[Pair], ratio: float) -> float:
    """Mean |predicted / measured - 1| of the pairs' step ratios, in percent."""
    return 100.0 * sum(abs(math.expm1(error(p, ratio))) for p in pairs) / max(1, len(pairs))


def report(pairs: Sequence[Pair], ratio: float, shipped: float) -> List[str]:
    """The fit's table: per source in sample and leave-one-source-out, then every pair."""
    dense = fitted_pairs(pairs)
    held = leave_one_source_out(dense)
    out = [f"block_scaled_gemm_ratio = {ratio:.3f} fitted on {len(dense)} dense MXFP8 pairs of "
           f"{len({p.source for p in dense})} sources (shipped {shipped:.3f})",
           "source            pairs  ratio error: at 1.0  in sample  left out (ratio fitted without it)"]
    for s in sorted({p.source for p in dense}):
        ps = [p for p in dense if p.source == s]
        loso = held.get(s)
        left = f"{mean_abs_pct(ps, loso):7.1f}% ({loso:.3f})" if loso is not None else "   n/a"
        out.append(f"{s:17s} {len(ps):5d}  {mean_abs_pct(ps, 1.0):17.1f}% {mean_abs_pct(ps, ratio):9.1f}% {left}")
    out.append("pair (step ratio predicted/measured - 1)        at 1.0  fitted  left out")
    for p in pairs:
        loso = held.get(p.source)
        tail = f" {math.expm1(error(p, loso)) * 100:+6.1f}%" if loso is not None and p in dense else "  (held)"
        out.append(f"  {p.label:62s} {math.expm1(error(p, 1.0)) * 100:+6.1f}% "
                   f"{math.expm1(error(p, ratio)) * 100:+6.1f}%{tail}")
    return out


def write(pairs: Sequence[Pair], ratio: float) -> List[str]:
    """Write ``ratio`` into the Blackwell gpu configs with a provenance naming both sources."""
    dense = fitted_pairs(pairs)
    counts = ", ".join(f"{sum(p.source == s for p in dense)} {s}" for s in sorted({p.source for p in dense}))
    prov = (f"fitted: the measured step ratios of {len(dense)} dense pairs of one job in two precisions ({counts}: "
            f"bf16 -> MXFP8 in {provenance_path(resolve_dataset('torchtitan'))}, FP8-CS -> MXFP8 in the "
            f"Megatron-Bridge tables of {provenance_path(resolve_dataset('published_runs'))}), each source "
            f"weighted equally, leave-one-source-out reported; vtrain.calibration.block_scaled, "
            f"{date.today().isoformat()}")
    for gpu in WRITTEN:
        note = prov if gpu in FITTED else f"transferred from: b200/gb200/gb300 fit (same MX tensor cores); {prov}"
        update_yaml(CONF_DIR / "gpu" / f"{gpu}.yaml", {"block_scaled_gemm_ratio": round(ratio, 3)},
                    {"block_scaled_gemm_ratio": note})
    return [f"wrote block_scaled_gemm_ratio={ratio:.3f} into gpu/{', gpu/'.join(WRITTEN)}"]
