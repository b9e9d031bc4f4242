"""A GPT / Llama block stack in plain PyTorch and its training loop, on one device (task=measure).

The model follows :class:`~vtrain.workload.model.ModelSpec` op for op (see vtrain/graph/builder.py):
embedding (+ learned positions) + dropout, ``num_layers`` pre-norm blocks (norm1, qkv, [rope],
attention core, proj, dropout+residual, norm2, fc1, gelu|swiglu, fc2, dropout+residual), final
norm, logits (tied to the word embedding unless ``tied_embeddings`` is false) and fp32 cross-entropy.
Parameters are kept in the training dtype (no fp32 master copy) and Adam runs on them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from vtrain.profiler import layers as L
from vtrain.profiler.timing import Timing, time_step
from vtrain.workload.enums import PositionEmbedding
from vtrain.workload.model import ModelSpec


def _norm_params(h: int, kind: str) -> Tuple[nn.Parameter, Optional[nn.Parameter]]:
    w = nn.Parameter(torch.ones(h))
    b = nn.Parameter(torch.zeros(h)) if kind == "layernorm" else None
    return w, b


class Block(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, f, bias = spec.hidden_size, spec.ffn_hidden_size, spec.use_bias
        self.spec = spec
        self.norm_kind = str(spec.norm.value)
        self.norm1_w, self.norm1_b = _norm_params(h, self.norm_kind)
        self.qkv = nn.Linear(h, h + 2 * spec.kv_size, bias=bias)
        self.proj = nn.Linear(h, h, bias=bias)
        self.norm2_w, self.norm2_b = _norm_params(h, self.norm_kind)
        self.fc1 = nn.Linear(h, 2 * f if spec.gated_mlp else f, bias=bias)
        self.fc2 = nn.Linear(f, h, bias=bias)

    def forward(self, x: torch.Tensor, flash: bool, rope_cs: Optional[Tuple[torch.Tensor, torch.Tensor]],
                mask: Optional[torch.Tensor]) -> torch.Tensor:
        s, p = self.spec, self.spec.dropout if self.training else 0.0
        y = L.norm(x, self.norm1_w, self.norm1_b, self.norm_kind)
        y = L.attention(self.qkv(y), s.num_heads, s.num_kv_heads, s.head_dim, flash=flash, p=p,
                        rope_cs=rope_cs, mask=mask, training=self.training)
        x = L.dropout_add(self.proj(y), x, p, self.training)
        y = L.norm(x, self.norm2_w, self.norm2_b, self.norm_kind)
        y = self.fc2(L.activation(self.fc1(y), s.gated_mlp))
        return L.dropout_add(y, x, p, self.training)


class TransformerLM(nn.Module):
    """GPT (learned positions, LayerNorm, GeLU, biases) or Llama (RoPE, RMSNorm, SwiGLU), per spec."""

    def __init__(self, spec: ModelSpec, flash: bool = True) -> None:
        super().__init__()
        h = spec.hidden_size
        self.spec, self.flash = spec, flash
        self.word = nn.Parameter(torch.randn(spec.vocab_shard(1), h) * 0.02)
        self.learned_pos = spec.position_embedding is PositionEmbedding.LEARNED
        self.pos = nn.Parameter(torch.randn(spec.max_seq_len, h) * 0.02) if self.learned_pos else None
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
        self.final_w, self.final_b = _norm_params(h, str(spec.norm.value))
        self.out = None if spec.tied_embeddings else nn.Parameter(torch.randn(spec.vocab_shard(1), h) * 0.02)
        self._cache: Dict[Any, Any] = {}

    def _tables(self, s: int, x: torch.Tensor) -> Tuple[Optional[Tuple[torch.Tensor, torch.Tensor]],
                                                         Optional[torch.Tensor]]:
        """RoPE cos/sin and the causal mask, built once per sequence length (as training code caches them)."""
        key = (s, x.device, x.dtype)
        if key not in self._cache:
            rotary = self.spec.rotary  # learned and ALiBi positions: no rotation
            rope_cs = L.rope_tables(s, self.spec.head_dim, x.device, x.dtype) if rotary else None
            self._cache[key] = (rope_cs, None if self.flash else L.causal_mask(s, x.device))
        return self._cache[key]

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        p = self.spec.dropout if self.training else 0.0
        x = F.embedding(tokens, self.word)
        if self.pos is not None:
            x = x + self.pos[:s]
        if p > 0:
            x = F.dropout(x, p, self.training)
        rope_cs, mask = self._tables(s, x)
        for block in self.blocks:
            x = block(x, self.flash, rope_cs, mask)
        x = L.norm(x, self.final_w, self.final_b, str(self.spec.norm.value))
        logits = F.linear(x, self.word if self.out is None else self.out)
        return L.cross_entropy(logits, labels)


def build_model(spec: ModelSpec, dev: torch.device, dtype: torch.dtype, flash: bool, seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    with torch.device(dev):
        model = TransformerLM(spec, flash)
    return model.to(dtype=dtype).train()


def make_optimizer(params: Iterable[torch.Tensor], dev: torch.device) -> torch.optim.Optimizer:
    """Adam as training uses it: the fused CUDA kernel on GPU, the multi-tensor (foreach) path on CPU."""
    if dev.type == "cuda":
        return torch.optim.Adam(params, lr=1e-5, fused=True)
    return torch.optim.Adam(params, lr=1e-5, foreach=True)


@dataclass(frozen=True)
class MeasuredRun:
    timing: Timing  # per iteration, by the profile's clock
    wall: Timing  # per iteration, wall clock
    microbatches: int
    params: int
    loss: float


def measure_training(spec: ModelSpec, micro_batch: int, seq_len: int, microbatches: int, dev: torch.device,
                     dtype: torch.dtype, flash: bool, warmup: int, iterations: int, clock: str = "wall"
                     ) -> MeasuredRun:
    """Real training iterations: forward + backward per micro-batch (gradients accumulate), one Adam
    step; returns the median iteration time over ``iterations`` after ``warmup`` iterations."""
    model = build_model(spec, dev, dtype, flash)
    opt = make_optimizer(model.parameters(), dev)
    gen = torch.Generator(device="cpu").manual_seed(1)
    data: List[Tuple[torch.Tensor, torch.Tensor]] = []
    for _ in range(microbatches * 2):  # two iterations' worth of distinct batches, cycled
        tok = torch.randint(0, spec.vocab_size, (micro_batch, seq_len + 1), generator=gen).to(dev)
        data.append((tok[:, :-1].contiguous(), tok[:, 1:].contiguous()))
    state: Dict[str, Any] = {"it": 0, "loss": 0.0}

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        base = (state["it"] % 2) * microbatches
        for i in range(microbatches):
            tokens, labels = data[base + i]
            loss = model(tokens, labels) / microbatches
            loss.backward()
        opt.step()
        state["it"] += 1
        state["loss"] = float(loss.detach())

    timing, wall = time_step(step, dev, warmup=max(1, warmup), repeats=iterations, clock=clock)
    params = sum(p.numel() for p in model.parameters())
    return MeasuredRun(timing, wall, microbatches, params, state["loss"] * microbatches)
