"""What a framework does to the graph that the model and the plan describe: one frozen value, read off the stack.

The graph builders take it whole (:func:`vtrain.graph.builder.build_model_graph`), so a new framework switch
adds a field here and the code that reads it, not a parameter threaded through every builder.
"""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.workload.stack import StackSpec


@dataclass(frozen=True, slots=True)
class GraphOptions:
    """The stack's graph switches (each documented on its :class:`StackSpec` field)."""

    rerun_fused_attention: bool = False  # StackSpec.recompute_fused_attention
    separate_projections: bool = False  # StackSpec.separate_projections
    cp_ring_merge: bool = False  # StackSpec.cp_ring_merge: vtrain.graph.cp_ring
    cp_accumulate_fp32: bool = False  # StackSpec.cp_grads_fp32: the ring's running output and gradients in fp32
    expands_kv: bool = False  # StackSpec.attention_expands_kv: K/V heads repeated to every query head
    fuse_elementwise: bool = False  # StackSpec.fuse_elementwise: vtrain.graph.fusion
    layout_copies: bool = False  # StackSpec.tp_layout_copies: vtrain.graph.layout
    symm_mem_tp: bool = False  # StackSpec.tp_overlap_symm_mem: vtrain.graph.layout
    fused_loss: bool = False  # StackSpec.fused_loss: vtrain.graph.builder.build_head
    train_metric_passes: int = 0  # StackSpec.train_metric_passes: vtrain.graph.builder.build_head
    loss_parallel: bool = False  # StackSpec.eager_loss_parallel: vtrain.graph.builder.build_head
    grouped_gemm_streams: int = 0  # StackSpec.grouped_gemm_streams: vtrain.graph.moe
    expert_wgrad_main_grad: bool = False  # StackSpec.expert_wgrad_main_grad: vtrain.graph.moe
    router_fusion: bool = False  # StackSpec.moe_router_fusion: vtrain.graph.router
    nvfp4_bf16_tail_fraction: float = 0.0  # StackSpec.nvfp4_bf16_tail_fraction: vtrain.graph.builder.tail_layers
    torchao_casts: bool = False  # StackSpec.torchao_mx_casts: NVFP4's, vtrain.graph.torchao_mx.with_torchao_nvfp4_casts


def graph_options(stack: StackSpec) -> GraphOptions:
    """The graph switches of ``stack``."""
    return GraphOptions(rerun_fused_attention=stack.recompute_fused_attention,
                        separate_projections=stack.separate_projections, cp_ring_merge=stack.cp_ring_merge,
                        cp_accumulate_fp32=stack.cp_grads_fp32, expands_kv=stack.attention_expands_kv,
                        fuse_elementwise=stack.fuse_elementwise, layout_copies=stack.tp_layout_copies,
                        symm_mem_tp=stack.tp_overlap_symm_mem, fused_loss=stack.fused_loss,
                        train_metric_passes=stack.train_metric_passes,
                        loss_parallel=stack.eager_loss_parallel, grouped_gemm_streams=stack.grouped_gemm_streams,
                        expert_wgrad_main_grad=stack.expert_wgrad_main_grad, router_fusion=stack.moe_router_fusion,
                        nvfp4_bf16_tail_fraction=stack.nvfp4_bf16_tail_fraction,
                        torchao_casts=stack.torchao_mx_casts)
