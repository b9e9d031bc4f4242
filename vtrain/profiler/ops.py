"""One torch benchmark per op of the simulator's graph (vtrain/graph/builder.py), at its TP-shard shape.

``benchmark(op, point)`` returns a zero-argument callable that runs the op the way the training model
(:mod:`vtrain.profiler.model`) runs it, on fresh random (non-zero) inputs:
- GEMMs: forward ``F.linear`` (with bias where the model has one), ``.dgrad`` = grad @ W, ``.wgrad``
  = grad^T @ x (+ the bias gradient); attention GEMMs as ``baddbmm`` / ``bmm`` at their batch shape.
- memory-bound ops: the :mod:`vtrain.profiler.layers` function; their ``.bwd`` is
  ``torch.autograd.grad`` of that function (autograd overhead included, as in training).
- flash_attn: split heads + SDPA + merge heads; ``flash_attn.bwd`` its autograd backward.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple

import torch

from vtrain.graph.ops import ComputeOp, FlashAttention, Gemm, MemoryOp
from vtrain.profiler import layers as L
from vtrain.workload.enums import PositionEmbedding
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

Bench = Callable[[], object]
LINEAR = ("qkv", "proj", "fc1", "fc2", "logits")


@dataclass(frozen=True)
class Point:
    """One sweep point: the (scaled) model, the plan (micro-batch, seq, tp) and where to run."""

    model: ModelSpec
    plan: ParallelPlan
    dev: torch.device
    dtype: torch.dtype

    @property
    def b(self) -> int:
        return self.plan.micro_batch_size

    @property
    def s(self) -> int:
        return self.plan.seq_len

    @property
    def t(self) -> int:
        return self.plan.tp

    @property
    def heads(self) -> int:
        return self.model.num_heads // self.t

    @property
    def kv_heads(self) -> int:
        return self.model.num_kv_heads // self.t

    @property
    def p(self) -> float:
        return self.model.dropout

    def rand(self, *shape: int, grad: bool = False) -> torch.Tensor:
        x = torch.randn(*shape, device=self.dev, dtype=self.dtype)
        return x.requires_grad_(grad)


def _grad_bench(out: torch.Tensor, inputs: Sequence[torch.Tensor]) -> Bench:
    g = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, list(inputs), g, retain_graph=True)


def _gemm(op: Gemm, pt: Point) -> Bench:
    base, _, kind = op.name.partition(".")
    if op.attention:
        d = pt.model.head_dim
        if op.name in ("attn.qk", "attn.av"):  # with the head split / merge copies of the unfused path
            qkv = pt.rand(pt.b, pt.s, (pt.heads + 2 * pt.kv_heads) * d, grad=True)
            probs = pt.rand(pt.b * pt.heads, pt.s, pt.s, grad=True)
            if op.name == "attn.qk":
                return lambda: L.unfused_scores(*L.split_heads(qkv, pt.heads, pt.kv_heads, d)[:2])
            return lambda: L.unfused_context(probs, L.split_heads(qkv, pt.heads, pt.kv_heads, d)[2], pt.heads)
        fwd = op.name == "attn.av"  # forward (records autograd); the others run inside backward
        a, b = pt.rand(op.batch, op.m, op.k, grad=fwd), pt.rand(op.batch, op.k, op.n, grad=fwd)
        return lambda: torch.bmm(a, b)
    has_bias = pt.model.use_bias and base in ("qkv", "proj", "fc1", "fc2")
    if kind == "":  # forward: x[m,k] @ W[n,k]^T (+ b)
        x, w = pt.rand(op.m, op.k, grad=True), pt.rand(op.n, op.k, grad=True)
        bias = pt.rand(op.n, grad=True) if has_bias else None
        return lambda: torch.nn.functional.linear(x, w, bias)
    if kind == "dgrad":  # dX[m,n] = dY[m,k] @ W[k,n]
        g, w = pt.rand(op.m, op.k), pt.rand(op.k, op.n)
        return lambda: torch.mm(g, w)
    if kind == "wgrad":  # dW[n,m] = dY[k,n]^T @ X[k,m]  (k = tokens), db = sum over tokens
        g, x = pt.rand(op.k, op.n), pt.rand(op.k, op.m)
        if has_bias:
            return lambda: (torch.mm(g.t(), x), g.sum(0))
        return lambda: torch.mm(g.t(), x)
    raise KeyError(op.name)


def _flash(op: FlashAttention, pt: Point) -> Bench:
    m, d = pt.model, pt.model.head_dim
    qkv = pt.rand(pt.b, pt.s, (pt.heads + 2 * pt.kv_heads) * d, grad=True)

    def fwd() -> torch.Tensor:
        return L.attention(qkv, pt.heads, pt.kv_heads, d, flash=True, p=m.dropout)

    if not op.backward:
        return fwd
    return _grad_bench(fwd(), [qkv])


def _memory_forward(name: str, pt: Point, grad: bool) -> Tuple[Callable[[], torch.Tensor], List[torch.Tensor]]:
    """The forward function of a memory-bound op and the inputs its backward differentiates."""
    m, b, s, h = pt.model, pt.b, pt.s, pt.model.hidden_size
    tokens = b * s
    if name in ("norm1", "norm2", "final_norm"):
        x, w = pt.rand(b, s, h, grad=grad), pt.rand(h, grad=grad)
        bias = pt.rand(h, grad=grad) if str(m.norm.value) == "layernorm" else None
        return (lambda: L.norm(x, w, bias, str(m.norm.value))), [t for t in (x, w, bias) if t is not None]
    if name in ("residual1", "residual2"):
        x, r = pt.rand(b, s, h, grad=grad), pt.rand(b, s, h, grad=grad)
        return (lambda: L.dropout_add(x, r, m.dropout)), [x, r]
    if name in ("gelu", "swiglu"):
        f = m.ffn_hidden_size // pt.t
        x = pt.rand(tokens, 2 * f if m.gated_mlp else f, grad=grad)
        return (lambda: L.activation(x, m.gated_mlp)), [x]
    if name == "rope":
        d = m.head_dim
        q, k = pt.rand(b, pt.heads, s, d, grad=grad), pt.rand(b, pt.kv_heads, s, d, grad=grad)
        cos, sin = L.rope_tables(s, d, pt.dev, pt.dtype)

        def rope() -> torch.Tensor:
            qq, kk = L.rope(q, k, cos, sin)
            return torch.cat([qq, kk], dim=1) if grad else qq
        return rope, [q, k]
    if name == "attn.softmax":
        sc, mask = pt.rand(b * pt.heads, s, s, grad=grad), L.causal_mask(s, pt.dev)
        return (lambda: L.masked_softmax(sc, mask)), [sc]
    if name == "attn.dropout":
        x = pt.rand(b * pt.heads, s, s, grad=grad)
        return (lambda: torch.nn.functional.dropout(x, m.dropout)), [x]
    if name == "embedding.lookup":
        table = pt.rand(m.vocab_shard(pt.t), h, grad=grad)
        tok = torch.randint(0, m.vocab_shard(pt.t), (b, s), device=pt.dev)
        return (lambda: torch.nn.functional.embedding(tok, table)), [table]
    if name == "embedding.position":
        x, pos = pt.rand(b, s, h, grad=grad), pt.rand(m.max_seq_len, h, grad=grad)
        return (lambda: x + pos[:s]), [x, pos]
    if name == "embedding.dropout":
        x = pt.rand(b, s, h, grad=grad)
        return (lambda: torch.nn.functional.dropout(x, m.dropout)), [x]
    if name == "embedding.grad":  # backward of lookup (+ positions): dense table gradient
        table = pt.rand(m.vocab_shard(pt.t), h, grad=True)
        tok = torch.randint(0, m.vocab_shard(pt.t), (b, s), device=pt.dev)
        learned = m.position_embedding is PositionEmbedding.LEARNED
        pos_table = pt.rand(m.max_seq_len, h, grad=True) if learned else None

        def emb() -> torch.Tensor:
            x = torch.nn.functional.embedding(tok, table)
            return x if pos_table is None else x + pos_table[:s]
        return emb, [t for t in (table, pos_table) if t is not None]
    if name == "cross_entropy":
        v = m.vocab_shard(pt.t)
        logits = pt.rand(b, s, v, grad=grad)
        labels = torch.randint(0, v, (b, s), device=pt.dev)
        return (lambda: L.cross_entropy(logits, labels)), [logits]
    raise KeyError(name)


def _memory(op: MemoryOp, pt: Point) -> Bench:
    if op.name == "embedding.grad":
        fwd, inputs = _memory_forward(op.name, pt, grad=True)
        return _grad_bench(fwd(), inputs)
    if op.name.endswith(".bwd"):
        fwd, inputs = _memory_forward(op.name[: -len(".bwd")], pt, grad=True)
        return _grad_bench(fwd(), inputs)
    fwd, _ = _memory_forward(op.name, pt, grad=True)  # training records autograd nodes in forward
    return fwd


def benchmark(op: ComputeOp, pt: Point) -> Bench:
    """A callable running ``op`` at the point's shapes; KeyError for an op this profiler does not know.

    Forward ops run with inputs that require grad, as in training (autograd records its graph)."""
    if isinstance(op, Gemm):
        return _gemm(op, pt)
    if isinstance(op, FlashAttention):
        return _flash(op, pt)
    return _memory(op, pt)


def largest_tensor_bytes(op: ComputeOp, pt: Point) -> float:
    """Rough size of the largest tensor a benchmark allocates (to skip points that do not fit)."""
    elem = torch.finfo(pt.dtype).bits // 8
    if isinstance(op, Gemm):
        return float(op.batch * max(op.m * op.k, op.k * op.n, op.m * op.n) * elem)
    if op.name.startswith("attn."):
        return float(pt.b * pt.heads * pt.s * pt.s * elem)
    if op.name.startswith("cross_entropy"):
        return float(pt.b * pt.s * pt.model.vocab_shard(pt.t) * 4)
    return float(getattr(op, "bytes", 0.0))
