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
from vtrain.graph.builder import Block
from vtrain.graph.ops import Op

MODULES = ("core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj")


def parse_modules(spec: str) -> Tuple[str, ...]:
    names = tuple(x.strip() for x in spec.split(",") if x.strip())
    for name in names:
        if name not in MODULES:
            raise ConfigError(f"recompute_modules: {name} is not one of {', '.join(MODULES)}")
    return names


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
