"""CUDA graphs: which ops of a pass replay from a captured graph, and so cost the host no launch of their own.

Megatron-Core's ``--cuda-graph-impl transformer_engine --cuda-graph-scope ...`` captures parts of each
transformer layer with Transformer Engine's ``make_graphed_callables`` (forward and backward graphs of each
part); a replay is one ``cudaGraphLaunch`` on the host however many kernels and collectives it holds. The
scopes (Megatron-Core's ``CudaGraphScope``):

- ``attn``: the attention sub-block, input norm to its residual add (with its TP / CP collectives);
- ``mlp``: a dense layer's MLP sub-block, pre-MLP norm to its residual add;
- ``moe``: an MoE layer's whole MLP sub-block (routing padded to capacity: no host sync inside);
- ``moe_router``: the pre-MLP norm, the router and its top-k;
- ``moe_preprocess``: the token dispatcher's preprocessing (the permutation before the dispatch);
- ``full_iteration``: every op of every pass.

Ops are told apart by name (:mod:`vtrain.graph.builder`, :mod:`vtrain.graph.moe`, :mod:`vtrain.graph.mla`);
a kernel fused from several ops (``a+b``, :mod:`vtrain.graph.fusion`) is captured when all of them are.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from vtrain.graph.ops import Op

_ATTN_ROOTS = frozenset(("norm1", "qkv", "wq", "wk", "wv", "qk_norm", "rope", "flash_attn", "attn", "proj",
                         "residual1", "mla", "cp"))
_MLP_ROOTS = frozenset(("norm2", "fc1", "fc2", "swiglu", "gelu", "residual2"))
_ROUTER = ("norm2", "moe.router")  # norm2, norm2.bwd, moe.router(.topk)(.dgrad, ...)
_PREPROCESS = ("moe.permute",)

Captured = Callable[[Op], bool]


def _part_captured(name: str, scopes: Sequence[str], moe_layer: bool) -> bool:
    root = name.split(".", 1)[0]
    if "attn" in scopes and root in _ATTN_ROOTS:
        return True
    if not moe_layer:
        return "mlp" in scopes and root in _MLP_ROOTS
    if "moe" in scopes and (root in ("norm2", "residual2") or name.startswith("moe.")):
        return True
    if "moe_router" in scopes and name.startswith(_ROUTER):
        return True
    return "moe_preprocess" in scopes and name.startswith(_PREPROCESS)


def captured_ops(scopes: Sequence[str], component: str) -> Optional[Captured]:
    """Whether an op of ``component`` (``layer``, ``moe``, ``emb``, ``head``, ``mtp``: the passes
    :func:`vtrain.sim.stage_costs.priced_passes` prices) replays from a graph; None: nothing is captured."""
    if not scopes:
        return None
    if "full_iteration" in scopes:
        return lambda op: True
    if component not in ("layer", "moe"):
        return None
    moe_layer = component == "moe"
    return lambda op: all(_part_captured(part, scopes, moe_layer) for part in op.name.split("+"))
