"""Each FP8 recipe's GEMM efficiency relative to per-tensor FP8, from a side-by-side measurement on one GPU.

Data: ``profiles/<gpu>/gemm_scaled.csv``, written by ``python -m vtrain.profiler.scaled_gemm`` (bf16,
per-tensor, rowwise and blockwise ``torch._scaled_mm`` at the same shapes, with and without fast
accumulation). Method: keep the GPU's fitted GEMM curve shape (size terms, fixed time, wave exponent: the
H100 fit for Hopper) and fit only the large-GEMM efficiency eta of each (recipe, fast_accum) table
(:func:`vtrain.calibration.gemm_tables.fit_eta_only`), on the table's large shapes (m·n·k >= 4096³, where the
curve's size terms and fixed time are a few percent): eta is the large-GEMM rate by definition, and the
recipes differ most where the shared curve shape does not follow them, at small shapes (on the H200, rowwise
runs 25% slower than per-tensor at <= 1024³ and 1.4% slower at the training shapes; fitted over all shapes,
that small-shape penalty leaked into eta as a 10% slower rowwise recipe). The error over all shapes is
reported, not fitted. A training step runs three GEMMs per linear layer
(output, input gradient, weight gradient) of equal FLOPs; torchao sets fast accumulation per GEMM
(``torchao/float8/config.py``: ``Float8LinearConfig``'s defaults, which its ``tensorwise`` and ``rowwise``
recipes both keep, turn it on for the output GEMM only; an older ``all_axiswise`` recipe had it on for all
three, as "the rowwise CUTLASS kernels are only fast with use_fast_accum=True"), so a recipe's effective eta
is the harmonic mean over its three GEMMs' settings. The ratio of a recipe's effective eta to
per-tensor FP8's is what ``bench/fit_gemm.py`` multiplies the configured fp8 eta by: a ratio measured on one
device, not an absolute rate, so it survives clocks, power caps and library versions that move both alike.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Dict, List, Tuple

import numpy as np

from vtrain.calibration.gemm_tables import GemmParams, GemmTable, Hardware, errors_pct, fit_eta_only, predict_s
from vtrain.errors import VtrainError

# fast accumulation of the (output, grad_input, grad_weight) GEMMs as each recipe runs them: torchao's
# Float8LinearConfig defaults, kept by Float8LinearConfig.from_recipe_name("tensorwise" | "rowwise"); cuBLAS
# blockwise scaling has no fast-accumulation mode (measured without it)
GEMM_FAST_ACCUM: Dict[str, Tuple[bool, bool, bool]] = {"fp8": (True, False, False),
                                                       "fp8_rowwise": (True, False, False),
                                                       "fp8_blockwise": (False, False, False)}
REFERENCE = "fp8"
LARGE_MNK = 4096**3  # eta is fitted on shapes this large (their fixed time is < 1%), as is the model-free check
MIN_LARGE_ROWS = 3  # fewer large shapes than this: eta is fitted on the whole table
Key = Tuple[str, bool]  # (recipe, fast_accum)


@dataclass(frozen=True)
class ScaledTable:
    """One device's measured GEMMs, per (recipe, fast_accum)."""

    gpu: str  # the gpu/ config it stands for
    device: str
    torch_version: str
    tables: Dict[Key, GemmTable]


def read_scaled_table(path: Path) -> ScaledTable:
    """The table ``python -m vtrain.profiler.scaled_gemm`` wrote; a malformed one is a one-line error."""
    rows: Dict[Key, List[List[float]]] = {}
    meta: Dict[str, str] = {}
    try:
        with path.open(newline="") as fh:
            for i, r in enumerate(csv.DictReader(fh), start=2):
                try:
                    key = (r["recipe"], r["fast_accum"] == "1")
                    values = [float(r[c]) for c in ("m", "n", "k", "flop_count", "time_s")]
                    labels = {c: r[c] for c in ("gpu", "device", "torch")}
                except (KeyError, TypeError, ValueError):
                    raise VtrainError(f"{path}:{i}: not a row of python -m vtrain.profiler.scaled_gemm") from None
                if not all(math.isfinite(v) and v > 0 for v in values):
                    raise VtrainError(f"{path}:{i}: m, n, k, flop_count and time_s must be finite and > 0")
                rows.setdefault(key, []).append(values)
                for c, v in labels.items():
                    if meta.setdefault(c, v) != v:
                        raise VtrainError(f"{path}:{i}: {c}={v} differs from the first row's {meta[c]}")
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise VtrainError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not rows:
        raise VtrainError(f"{path}: no rows")
    tables = {}
    for (recipe, fast), a in rows.items():
        x = np.asarray(a)
        tables[(recipe, fast)] = GemmTable(meta["gpu"], recipe, np.ones(len(x)), x[:, 0], x[:, 1], x[:, 2],
                                           x[:, 4])
    return ScaledTable(meta["gpu"], meta["device"], meta["torch"], tables)


@dataclass(frozen=True)
class RecipeFit:
    eta: Dict[Key, float]  # fitted large-GEMM efficiency of each measured (recipe, fast_accum)
    median_error_pct: Dict[Key, float]  # median |error| of the fit over all the table's shapes
    fitted_rows: Dict[Key, int]  # how many (large) shapes eta was fitted on
    ratio: Dict[str, float]  # recipe -> effective eta / per-tensor FP8's effective eta
    shape_ratio: Dict[str, float]  # model-free cross-check: median over large shapes of the step-time ratio


def effective_eta(eta: Dict[Key, float], recipe: str) -> float:
    """Harmonic mean of the recipe's three GEMMs' eta (equal FLOPs each)."""
    return 3.0 / sum(1.0 / eta[(recipe, fast)] for fast in GEMM_FAST_ACCUM[recipe])


def _time_by_shape(t: GemmTable) -> Dict[Tuple[float, float, float], float]:
    return {(m, n, k): s for m, n, k, s in zip(t.m, t.n, t.k, t.time_s)}


def fit_recipes(table: ScaledTable, shape: GemmParams, hw: Hardware) -> RecipeFit:
    """Fit each (recipe, fast_accum) table's eta on ``shape`` and the effective ratios to per-tensor FP8."""
    eta: Dict[Key, float] = {}
    err: Dict[Key, float] = {}
    used: Dict[Key, int] = {}
    recipes = {key: t for key, t in table.tables.items() if key[0] in GEMM_FAST_ACCUM}
    large = {key: t.where(t.m * t.n * t.k >= LARGE_MNK) for key, t in recipes.items()}
    # one rule for every recipe, so their ratios compare like with like: the large shapes where each table has
    # enough of them, else every table whole
    on_large = all(len(t.time_s) >= MIN_LARGE_ROWS for t in large.values())
    for key, t in recipes.items():
        fit_on = large[key] if on_large else t
        p = fit_eta_only(shape, fit_on, hw)
        eta[key] = p.eta_max
        used[key] = len(fit_on.time_s)
        err[key] = float(np.median(errors_pct(predict_s(p, t, hw), t.time_s)))
    complete = [r for r, modes in GEMM_FAST_ACCUM.items() if all((r, f) in eta for f in modes)]
    if REFERENCE not in complete:
        raise VtrainError(f"the table has no per-tensor fp8 rows with fast_accum {GEMM_FAST_ACCUM[REFERENCE]}: "
                          "nothing to compare the recipes with")
    ref = effective_eta(eta, REFERENCE)
    ratio = {r: effective_eta(eta, r) / ref for r in complete if r != REFERENCE}
    shape_ratio = {}
    for r in ratio:  # per large shape: a linear layer's three GEMMs under per-tensor fp8 over the same under r
        mine = [_time_by_shape(table.tables[(r, f)]) for f in GEMM_FAST_ACCUM[r]]
        theirs = [_time_by_shape(table.tables[(REFERENCE, f)]) for f in GEMM_FAST_ACCUM[REFERENCE]]
        common = [s for s in set.intersection(*(set(t) for t in mine + theirs)) if s[0] * s[1] * s[2] >= LARGE_MNK]
        if not common:
            continue
        shape_ratio[r] = float(median(sum(t[s] for t in theirs) / sum(t[s] for t in mine) for s in common))
    return RecipeFit(eta, err, used, ratio, shape_ratio)

