"""Time the FP8 GEMM recipes against each other on one device: bf16, per-tensor, rowwise and blockwise.

Why: the cost model prices an fp8 plan's linear layers at one efficiency per format (``gpu.
gemm_efficiency_by_precision``), fitted to per-tensor-scaled tables. torchao's rowwise recipe runs another
kernel (``torch._scaled_mm`` with per-row scales runs cuBLASLt's rowwise scaling on Hopper with cuBLAS >= 12.9,
else PyTorch's CUTLASS kernel, which ``gpu.rowwise_cutlass_gemm_ratio`` prices; per-tensor scales cuBLASLt)
and DeepSeek-style 1x128 / 128x128 blocks a third (cuBLAS >= 12.9 on sm_90). Only a measurement of the kernels
side by side, at the same shapes, says how far apart they run; ``bench/fit_gemm.py`` turns
this table into each recipe's efficiency relative to per-tensor FP8 (``vtrain/calibration/fp8_recipes.py``).

Each GEMM is ``out[m, n] = a[m, k] @ b[n, k]^T`` with ``a`` row-major and ``b`` column-major (the layout
``F.linear`` and torchao's float8 linear give ``_scaled_mm``), bf16 output. ``fast_accum`` is
``_scaled_mm``'s ``use_fast_accum``: torchao's per-tensor and rowwise recipes use it for the output GEMM only
(``torchao/float8/config.py``: ``Float8LinearConfig``'s defaults); both settings are measured. Timing:
:func:`vtrain.profiler.timing.time_op` (CUDA events with the GPU kept busy; warm-up, median and p10/p90).

    python -m vtrain.profiler.scaled_gemm --gpu h200 --out profiles/measured/h200 [--device cuda] \
        [--grid xla|training|all]
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from vtrain.errors import VtrainError
from vtrain.profiler.device import device_name
from vtrain.profiler.table_run import MEASURE_ERRORS, check_args, finish, open_device, reason, release, table_parser
from vtrain.profiler.timing import Timing, time_op

TABLE_FILE = "gemm_scaled.csv"
COLUMNS = ("gpu", "device", "torch", "cuda", "recipe", "fast_accum", "m", "n", "k", "flop_count", "time_s",
           "p10_s", "p90_s", "tflops")
BLOCK = 128  # the block edge of 1x128 activation / 128x128 weight scales (DeepSeek-V3, TE Float8BlockScaling)


@dataclass(frozen=True)
class Recipe:
    name: str  # a vtrain precision: bf16 | fp8 | fp8_rowwise | fp8_blockwise
    fast_accum: bool  # _scaled_mm's use_fast_accum (bf16: not applicable, False)


RECIPES: Tuple[Recipe, ...] = (Recipe("bf16", False), Recipe("fp8", True), Recipe("fp8", False),
                               Recipe("fp8_rowwise", True), Recipe("fp8_rowwise", False),
                               Recipe("fp8_blockwise", False))
# The XLA GEMM table's single-matrix grid (vtrain/data/modern_gpus/xla_gemm_perf_table_h100_b200.csv, b = 1):
# the bf16 rows cross-check this setup against that table.
XLA_DIMS = (256, 512, 1024, 2048, 4096)
# Training shapes: tokens of one micro-batch x the hidden and FFN widths of Llama-3 8B / 70B (whole and TP-2
# shards: 4096, 8192, 14336, 28672 / 2), so the fit sees the GEMMs fp8 plans actually run.
TRAINING_M = (8192, 16384)
TRAINING_NK = (4096, 8192, 14336)
GRIDS = ("xla", "training", "all")


def shapes(grid: str) -> List[Tuple[int, int, int]]:
    """(m, n, k) of the grid: ``xla`` (125 shapes), ``training`` (18) or ``all``."""
    if grid not in GRIDS:
        raise VtrainError(f"--grid={grid} is not one of {', '.join(GRIDS)}")
    out: List[Tuple[int, int, int]] = []
    if grid in ("xla", "all"):
        out += [(m, n, k) for m in XLA_DIMS for n in XLA_DIMS for k in XLA_DIMS]
    if grid in ("training", "all"):
        out += [(m, n, k) for m in TRAINING_M for n in TRAINING_NK for k in TRAINING_NK]
    return out


def _scales(recipe: str, m: int, n: int, k: int, dev: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """scale_a, scale_b as ``_scaled_mm`` takes them for the recipe (values are irrelevant to the time)."""
    f32 = torch.float32
    if recipe == "fp8":
        return torch.ones((), device=dev, dtype=f32), torch.ones((), device=dev, dtype=f32)
    if recipe == "fp8_rowwise":  # one scale per row of a and per column of b, contiguous
        return torch.ones(m, 1, device=dev, dtype=f32), torch.ones(1, n, device=dev, dtype=f32)
    # 1x128 blocks of a (outer-dim-major, as cuBLAS wants them) and 128x128 blocks of b, whose rows of k/128
    # scales are padded to a multiple of 4 (cuBLAS's layout for 128x128 block scales; PyTorch's tests pad so)
    kb = k // BLOCK
    scale_a = torch.ones(kb, m, device=dev, dtype=f32).t()
    scale_b = torch.ones(n // BLOCK, -(-kb // 4) * 4, device=dev, dtype=f32)[:, :kb].t()
    return scale_a, scale_b


Operands = Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]


def operands(recipe: Recipe, m: int, n: int, k: int, dev: torch.device) -> Operands:
    """(a, b, scale_a, scale_b) of one GEMM at (m, n, k): random values, the recipe's dtypes and layouts."""
    if recipe.name == "bf16":
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        return a, torch.randn(n, k, device=dev, dtype=torch.bfloat16).t(), None, None
    if recipe.name == "fp8_blockwise" and (k % BLOCK or n % BLOCK):
        raise ValueError(f"blockwise scales need n and k divisible by {BLOCK}")
    a8 = torch.randn(m, k, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn).t()
    return (a8, b8, *_scales(recipe.name, m, n, k, dev))


def run(recipe: Recipe, ops: Operands) -> torch.Tensor:
    """The GEMM: ``torch.mm`` (bf16) or ``torch._scaled_mm`` with the recipe's scales, bf16 output."""
    a, b, scale_a, scale_b = ops
    if scale_a is None or scale_b is None:
        return torch.mm(a, b)
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                            use_fast_accum=recipe.fast_accum)


def gemm(recipe: Recipe, m: int, n: int, k: int, dev: torch.device) -> Callable[[], torch.Tensor]:
    """A zero-argument call that runs one GEMM of the recipe at (m, n, k) on fresh random operands."""
    ops = operands(recipe, m, n, k, dev)
    return lambda: run(recipe, ops)


def _row(gpu: str, dev: torch.device, recipe: Recipe, m: int, n: int, k: int, t: Timing) -> Dict[str, object]:
    flops = 2 * m * n * k
    return {"gpu": gpu, "device": device_name(dev), "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "recipe": recipe.name, "fast_accum": int(recipe.fast_accum), "m": m, "n": n, "k": k,
            "flop_count": flops, "time_s": f"{t.median_s:.6g}", "p10_s": f"{t.p10_s:.6g}",
            "p90_s": f"{t.p90_s:.6g}", "tflops": f"{flops / t.median_s / 1e12:.6g}"}


def measure(gpu: str, dev: torch.device, grid: Iterable[Tuple[int, int, int]], recipes: Sequence[Recipe] = RECIPES,
            warmup: int = 2, repeats: int = 5, log: Optional[Callable[[str], None]] = None
            ) -> Tuple[List[Dict[str, object]], List[str]]:
    """Rows of the table, and what was skipped: one line per recipe and reason (unsupported on this device or
    torch), with how many shapes and the first of them. Each shape is tried on its own."""
    rows: List[Dict[str, object]] = []
    failed: Dict[Tuple[str, str], List[str]] = {}  # (recipe label, reason) -> shapes
    for m, n, k in grid:
        for r in recipes:
            name = f"{r.name}{' fast-accum' if r.fast_accum else ''}"
            try:
                fn = gemm(r, m, n, k, dev)
                t = time_op(fn, dev, warmup=warmup, repeats=repeats)
            except MEASURE_ERRORS as exc:
                failed.setdefault((name, reason(exc)), []).append(f"{m}x{n}x{k}")
                continue
            finally:
                release(dev)
            rows.append(_row(gpu, dev, r, m, n, k, t))
            if log:
                log(f"{name} {m}x{n}x{k}: {t.median_s * 1e6:9.1f} us  {2 * m * n * k / t.median_s / 1e12:7.1f} TFLOP/s")
    skipped = [f"{name}: {len(at)} shape(s), from {at[0]}: {reason}" for (name, reason), at in failed.items()]
    return rows, skipped


def main(argv: Sequence[str]) -> int:
    ap = table_parser("python -m vtrain.profiler.scaled_gemm", __doc__.splitlines()[0], TABLE_FILE)
    ap.add_argument("--grid", default="all", help=f"shapes: {', '.join(GRIDS)}")
    args = ap.parse_args(argv)
    try:
        check_args(args)
        grid = shapes(args.grid)
        dev, created = open_device(args)
    except VtrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows, skipped = measure(args.gpu, dev, grid, warmup=args.warmup, repeats=args.repeats, log=print)
    return finish(args.out / TABLE_FILE, COLUMNS, rows, skipped, created, "GEMM", device_name(dev))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
