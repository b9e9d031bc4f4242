"""Time PyTorch's fused attention (``F.scaled_dot_product_attention``) over sequence lengths on one device.

Why: the cost model prices fused attention at a rate per GPU at the 8K anchor (``gpu.flash_attention_efficiency``,
from one 8K FlashAttention-3 measurement inside a training step) times a stack factor (the stack's kernel
against that one; on Hopper ``stack.attention_kernel_efficiency_by_architecture``, read off this table's 8K row
at the sustained clock of the ``sustained_gemm.csv`` beside it) and a length curve
(``gpu.flash_attention_k0_tokens``). This table times the kernels torchtitan and Transformer Engine run, at the
lengths context-parallel runs reach (a ring step is one rank's queries against another rank's keys, non-causal,
s/cp each): profiles/measured/h200/attention_lengths.csv, measured on a lent H200. It serves
``bench/fit_attention.py`` (which prints the rate each row implies and can set a stack's Hopper factor).
The cuDNN backend (the kernel family Transformer Engine's fused attention runs on Hopper) is timed at the same
cases, so the length curve of each kernel can be read apart (``bench/fit_attention_length.py`` fits one per GPU).

Cases (Llama-3 8B's attention: 32 query heads of 128, K/V repeated to 32 heads before SDPA as torchtitan
does, batch 1, bf16): whole causal sequences of 2K-128K tokens, and non-causal square blocks of 8K-32K (ring
steps). Each case times the forward and the backward (``torch.autograd.grad`` of the output) with
:func:`vtrain.profiler.timing.time_op`. On CUDA each case runs once per backend, flash (torchtitan lists it
first) then cuDNN; the backend is recorded per row, and a backend that cannot run a case is skipped with
torch's reason.

    python -m vtrain.profiler.attention_lengths --gpu h200 --out profiles/measured/h200 [--device cuda] \
        [--max-len 131072]
"""
from __future__ import annotations

import contextlib
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from vtrain.errors import VtrainError
from vtrain.io.args import int_at_least
from vtrain.profiler.device import device_name
from vtrain.profiler.table_run import MEASURE_ERRORS, check_args, finish, open_device, reason, release, table_parser
from vtrain.profiler.timing import time_op

TABLE_FILE = "attention_lengths.csv"
COLUMNS = ("gpu", "device", "torch", "backend", "causal", "batch_heads", "q_len", "kv_len", "head_dim", "fwd_s",
           "bwd_s")
HEADS, HEAD_DIM = 32, 128  # Llama-3 8B (model/llama3_8b.yaml)
CAUSAL_LENS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)  # up to 128K: the long-context rows' lengths
BLOCK_LENS = (8192, 16384, 32768)


@dataclass(frozen=True)
class Case:
    causal: bool
    q_len: int
    kv_len: int


def cases(max_len: int) -> List[Case]:
    """Whole causal sequences, then non-causal ring-step blocks, up to ``max_len`` tokens."""
    out = [Case(True, n, n) for n in CAUSAL_LENS if n <= max_len]
    return out + [Case(False, n, n) for n in BLOCK_LENS if n <= max_len]


CUDA_BACKENDS = ("flash", "cudnn")  # SDPA's FlashAttention-2 (torchtitan's first choice), cuDNN's fused kernel


def backends(dev: torch.device) -> Tuple[str, ...]:
    """The SDPA backends timed on the device: both fused kernels on CUDA, SDPA's default elsewhere."""
    return CUDA_BACKENDS if dev.type == "cuda" else ("default",)


@contextlib.contextmanager
def sdpa_backend(name: str) -> Iterator[str]:
    """Ask SDPA for one backend (``flash`` or ``cudnn``); ``default`` leaves SDPA's own choice."""
    if name == "default":
        yield name
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    with sdpa_kernel([kind]):
        yield name


def attention_calls(case: Case, dev: torch.device, heads: int = HEADS, head_dim: int = HEAD_DIM,
                    dtype: torch.dtype = torch.bfloat16) -> Tuple[Callable[[], Any], Callable[[], Any]]:
    """(forward, backward) zero-argument calls of SDPA at the case's shape, on fresh random inputs."""
    def rand(n: int) -> torch.Tensor:
        return torch.randn(1, heads, n, head_dim, device=dev, dtype=dtype, requires_grad=True)

    q, k, v = rand(case.q_len), rand(case.kv_len), rand(case.kv_len)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(q, k, v, is_causal=case.causal)
    grad = torch.randn_like(out)
    return ((lambda: sdpa(q, k, v, is_causal=case.causal)),
            (lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)))


def measure(gpu: str, dev: torch.device, todo: Sequence[Case], warmup: int = 2, repeats: int = 5,
            heads: int = HEADS, head_dim: int = HEAD_DIM, log: Optional[Callable[[str], None]] = None
            ) -> Tuple[List[Dict[str, object]], List[str]]:
    """Rows of the table and one line per case that could not run (with torch's reason)."""
    rows: List[Dict[str, object]] = []
    skipped: List[str] = []
    for c, backend in ((c, b) for c in todo for b in backends(dev)):
        label = f"{backend} {'causal' if c.causal else 'block'} {c.q_len}x{c.kv_len}"
        try:
            with sdpa_backend(backend):
                fwd, bwd = attention_calls(c, dev, heads, head_dim)
                t_fwd = time_op(fwd, dev, warmup=warmup, repeats=repeats)
                t_bwd = time_op(bwd, dev, warmup=warmup, repeats=repeats)
        except MEASURE_ERRORS as exc:
            skipped.append(f"{label}: {reason(exc)}")
            continue
        finally:
            release(dev)
        rows.append({"gpu": gpu, "device": device_name(dev), "torch": torch.__version__, "backend": backend,
                     "causal": int(c.causal), "batch_heads": heads, "q_len": c.q_len, "kv_len": c.kv_len,
                     "head_dim": head_dim, "fwd_s": f"{t_fwd.median_s:.6g}", "bwd_s": f"{t_bwd.median_s:.6g}"})
        if log:
            log(f"{label}: forward {t_fwd.median_s * 1e3:8.2f} ms  backward {t_bwd.median_s * 1e3:8.2f} ms")
    return rows, skipped


def read_table(path: Path) -> List[Dict[str, str]]:
    """The rows of a table this module wrote, checked: a malformed one is a one-line error naming the file."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise VtrainError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not rows or any(c not in rows[0] for c in COLUMNS):
        raise VtrainError(f"{path}: not a table of python -m vtrain.profiler.attention_lengths")
    for i, r in enumerate(rows, start=2):
        try:
            ok = all(math.isfinite(float(r[c])) and float(r[c]) > 0 for c in ("q_len", "kv_len", "fwd_s", "bwd_s"))
        except (TypeError, ValueError):
            ok = False
        if not ok or r["gpu"] != rows[0]["gpu"]:
            raise VtrainError(f"{path}:{i}: lengths and times must be numbers > 0, all rows of one gpu")
    return rows


def main(argv: Sequence[str]) -> int:
    ap = table_parser("python -m vtrain.profiler.attention_lengths", __doc__.splitlines()[0], TABLE_FILE)
    ap.add_argument("--max-len", type=int_at_least(16), default=max(CAUSAL_LENS + BLOCK_LENS),
                    help="the longest sequence or block timed")
    args = ap.parse_args(argv)
    try:
        check_args(args)
        todo = cases(args.max_len)
        if not todo:
            raise VtrainError(f"--max-len={args.max_len} is below the shortest case ({min(CAUSAL_LENS)} tokens)")
        dev, created = open_device(args)
    except VtrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows, skipped = measure(args.gpu, dev, todo, warmup=args.warmup, repeats=args.repeats, log=print)
    return finish(args.out / TABLE_FILE, COLUMNS, rows, skipped, created, "attention case", device_name(dev))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
