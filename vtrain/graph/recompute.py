"""Megatron-Core's fine-grained selective recompute (``--recompute-granularity selective
--recompute-modules ...``): the forward ops of the named modules run again before the backward pass.

Modules: core_attn (the unfused attention core; inside the fused kernel's backward with flash attention),
layernorm (the two norms of the layer), mlp (a dense MLP), moe (the whole MoE branch, its dispatch and
combine included), moe_act (the expert activation), shared_experts, mla_up_proj (MLA's up-projections and
RoPE).
"""
from __future__ import annotations

from typing import List, Tuple

from vtrain.errors import ConfigError
from vtrain.graph.blocks import Block
from vtrain.graph.ops import Op
from vtrain.workload.enums import parse_recompute_modules


def parse_modules(spec: str) -> Tuple[str, ...]:
    try:
        return parse_recompute_modules(spec)
    except ValueError as e:  # check_plan reports it first; kept for direct graph builds
        raise ConfigError(f"parallelism.recompute_modules={spec}: {e}") from None


def selective_ops(spec: str, att: Block, ffn: Block, norms: Tuple[Op, ...]) -> Tuple[Op, ...]:
    out: List[Op] = []
    names = parse_modules(spec)
    if "core_attn" in names:
        out += att.selective_recompute + ffn.selective_recompute
    if "layernorm" in names:
        out += norms
    for block in (att, ffn):
        mods = dict(block.modules)
        for name in names:
            if name == "moe_act" and "moe" in names:
                continue  # inside the whole MoE branch
            out += mods.get(name, ())
    return tuple(out)
