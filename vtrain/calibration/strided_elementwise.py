"""The HBM traffic per SM of PyTorch's non-vectorized element-wise kernels (``gpu.strided_gb_per_s_per_sm``),
measured on the lent H200's op profile.

PyTorch's CUDA element-wise loop vectorizes (16-byte loads per thread) only when every operand is contiguous. An
operand broadcast along a dimension (RoPE's cos / sin tables over batch and heads) or sliced along the last one (the
two halves of ``x.chunk(2, -1)``) sends the kernel down its unrolled path: one element per load, so each SM keeps
a few KB in flight and the kernel is latency-bound well below the HBM bandwidth. Megatron-Core runs gpt-oss's YaRN
rotation and its clamp before the gated activation on that path (vtrain.graph.eager_paths).

The lent H200 (profiles/measured/h200-llama/ops.csv, torch 2.11, CUDA 13.0, CUDA-event medians with the GPU kept
busy) timed two such chains as vtrain's profiler runs them (vtrain.profiler.layers):

- ``rope``: q [b, 32, s, 128] and k [b, 8, s, 128], per tensor ``x * cos`` (2 element moves), ``-half`` (1),
  ``cat`` (2), ``* sin`` (2), the sum (3): 10 moves per rotated element, the chain Megatron-Core's unfused
  ``_apply_rotary_pos_emb_bshd`` runs;
- ``swiglu``: ``silu(gate) * up`` on the chunk halves of [tokens, 2 x 14,336]: 5 moves per output element.

Each point's rate over the H200's 4.8 TB/s is a measured fraction (0.30-0.39; a contiguous add in the same profile,
``residual1``, reaches 0.89); their median over the H200's 132 SMs is the constant. Such a kernel is bound by the
bytes each SM keeps in flight over the memory latency (Little's law), not by the HBM: the same rate per SM transfers
to every GPU (capped by its ``memory_efficiency`` x HBM), a lower fraction of a GPU with more bandwidth per SM
(B200: 54 GB/s per SM of HBM against the H200's 36, H100's 25).

    python -c "from vtrain.calibration.strided_elementwise import fit; print(fit())"
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Dict, List, Tuple

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "measured" / "h200-llama" / "ops.csv"
H200_HBM_BYTES_PER_S = 4.8e12  # vtrain/conf/gpu/h200.yaml (datasheet)
H200_SMS = 132  # vtrain/conf/gpu/h200.yaml (datasheet)
BYTES_PER_ELEMENT = 2.0  # bf16
ROPE_MOVES = 10.0  # per rotated element of q and k (module docstring)
SWIGLU_MOVES = 5.0  # per output element


def _moved_elements(row: Dict[str, str]) -> float:
    """Element moves of one profiled ``rope`` or ``swiglu`` forward."""
    mb, seq = int(row["micro_batch"]), int(row["seq_len"])
    if row["op"] == "rope":
        return ROPE_MOVES * mb * seq * (int(row["heads"]) + int(row["kv_heads"])) * int(row["head_dim"])
    return SWIGLU_MOVES * mb * seq * int(row["ffn"])


def points(path: Path = PROFILE) -> List[Tuple[str, int, int, float]]:
    """(op, micro-batch, sequence, fraction of the H200's HBM bandwidth) of each profiled forward chain."""
    out: List[Tuple[str, int, int, float]] = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["op"] in ("rope", "swiglu"):
                rate = _moved_elements(row) * BYTES_PER_ELEMENT / float(row["median_s"])
                out.append((row["op"], int(row["micro_batch"]), int(row["seq_len"]), rate / H200_HBM_BYTES_PER_S))
    return out


def fit(path: Path = PROFILE) -> float:
    """GB/s per SM: the median fraction over the profiled chains, times the H200's HBM bandwidth over its SMs."""
    return statistics.median(p[-1] for p in points(path)) * H200_HBM_BYTES_PER_S / H200_SMS / 1e9
