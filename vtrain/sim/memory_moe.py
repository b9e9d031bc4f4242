"""Memory terms of mixture-of-experts and MLA layers, per GPU and micro-batch (the saved tensors counted as
in Korthikanti et al. 2022, Sec. 4, for the dense layer in :mod:`vtrain.sim.memory`).

An MoE layer saves, besides its attention block and norms: the router input and fp32 probabilities, the
permuted expert input (rows = tokens·k·etp·load of the busiest rank, :func:`vtrain.graph.moe.expert_rows`),
the expert FC1 output and activation output (the routing weights apply inside it), and the shared
experts' tensors (a tensor-parallel MLP). Megatron-Core's fine-grained recompute drops what its modules
recompute: ``moe_act`` the activation output, ``moe`` everything inside the MoE branch, ``layernorm`` the
norm outputs, ``mla_up_proj`` MLA's up-projected q/k/v. Routed experts' optimizer states are sharded over
the expert data-parallel group (edp), the rest over dp. Dispatch buffers: the send and receive buffers of
the dispatch all-to-all (2 x the rows of the busiest rank).
"""
from __future__ import annotations

from typing import Callable, Tuple

from vtrain.graph.moe import expert_rows
from vtrain.graph.recompute import parse_modules
from vtrain.sim.memory import inflight_layers, saved_linear_input_bytes, state_bytes_per_param
from vtrain.workload.enums import Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.moe_load import moe_tokens
from vtrain.workload.partition import StagePartition
from vtrain.workload.plan import ParallelPlan


def _modules(plan: ParallelPlan) -> tuple[str, ...]:
    return parse_modules(plan.recompute_modules) if plan.recompute == Recompute.SELECTIVE else ()


def mla_attention_delta_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """MLA's saved tensors minus those the dense formula counts for a q/k/v/out of width h and kv_size."""
    s, b, t, dt = plan.seq_len // plan.cp, plan.micro_batch_size, plan.tp, plan.dtype_bytes
    n = model.num_heads
    qk = model.mla_qk_dim
    up = 0.0 if "mla_up_proj" in _modules(plan) else float(s * b) * dt * n * (2 * qk + model.v_head_dim) / t
    down = float(s * b) * dt * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    attn_out = float(s * b) * dt * n * model.v_head_dim / t
    dense = float(s * b) * dt * (2 * model.hidden_size + 2 * model.kv_size) / t
    return up + down + attn_out - dense


def moe_mlp_delta_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """An MoE layer's MLP-branch tensors minus the dense MLP's (FC1 and activation outputs of width f)."""
    if plan.recompute == Recompute.FULL:
        return 0.0
    s, b, t, dt = plan.seq_len, plan.micro_batch_size, plan.tp, plan.dtype_bytes
    s //= plan.cp
    # a linear layer's saved input is quantized with a low precision (the rule of layer_activation_bytes)
    lin = 1 if plan.precision.low else dt
    gate = 2 if model.gated_mlp else 1
    mods = _modules(plan)
    dense = float(s * b) * (dt * gate + lin) * model.ffn_hidden_size / t  # FC1 output(s) + FC2 input
    tokens = moe_tokens(plan)
    h, e = model.hidden_size, model.num_experts
    if "moe" in mods:
        routed = 0.0
    else:
        rows = expert_rows(model, plan) * (e // plan.ep)
        f = model.expert_ffn // plan.expert_tp
        act = 0.0 if "moe_act" in mods else rows * f * lin  # the activation output: FC2's input
        # router probabilities (fp32), the permuted FC1 input, FC1 output(s), FC2 input. The routing weights
        # multiply inside the expert activation (Megatron-Core passes permuted_probs to the experts' weighted
        # SwiGLU), so the combine saves no expert outputs for their gradient
        routed = tokens * e * 4.0 + rows * h * lin + rows * gate * f * dt + act
    shared = 0.0
    if model.shared_ffn and "shared_experts" not in mods and "moe" not in mods:
        shared = float(s * b) * (dt * gate + lin) * model.shared_ffn / t
    return routed + shared - dense


def dispatch_buffer_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    if not model.is_moe or plan.ep * plan.expert_tp == 1:
        return 0.0
    return 2.0 * expert_rows(model, plan) * (model.num_experts // plan.ep) * model.hidden_size * plan.dtype_bytes


def layernorm_recompute_saving_bytes(model: ModelSpec, plan: ParallelPlan) -> float:
    """``layernorm`` recompute: the two norm outputs (QKV and FC1 inputs) are not saved, at the bytes
    :func:`vtrain.sim.memory.layer_activation_bytes` counts them (quantized in a low-precision run) for the
    s/cp tokens of this rank."""
    if "layernorm" not in _modules(plan):
        return 0.0
    sp_div = plan.tp if plan.sequence_parallel else 1
    return 2.0 * saved_linear_input_bytes(plan) * plan.tokens_per_rank * model.hidden_size / sp_div


StateBytes = Tuple[float, float, float, float, float]  # weights, gradients, optimizer, activations, other


def moe_memory(model: ModelSpec, plan: ParallelPlan, part: StagePartition, masters_sharded: bool = False
               ) -> Callable[[int, StateBytes], StateBytes]:
    """A function (stage, the dense terms) -> the terms with the MoE, MLA and MTP ones: routed experts'
    states sharded by ZeRO over the expert-data-parallel group (edp) instead of dp·cp, MoE/MLA activations,
    dispatch buffers."""
    dense_bytes = state_bytes_per_param(plan, masters_sharded=masters_sharded)
    expert_bytes = state_bytes_per_param(plan, shards=max(1, plan.expert_dp), masters_sharded=masters_sharded)
    dw, dg, do = (e - d for e, d in zip(expert_bytes, dense_bytes))
    full = plan.recompute == Recompute.FULL
    attn = 0.0 if full or not model.is_mla else mla_attention_delta_bytes(model, plan)
    per_moe = moe_mlp_delta_bytes(model, plan) if model.is_moe else 0.0
    saving = 0.0 if full else layernorm_recompute_saving_bytes(model, plan)
    buffers = dispatch_buffer_bytes(model, plan)
    last = part.stage_of(part.chain_len - 1)

    def apply(s: int, terms: StateBytes) -> StateBytes:
        weights, grads, opt, acts, other = terms
        experts = part.stage_expert_params(s)
        weights, grads, opt = weights + experts * dw, grads + experts * dg, opt + experts * do
        layers = part.stage_layers(s) + (part.mtp_layers if s == last else 0)
        n_moe = sum(part.moe_at(part.position(s, c)) for c in range(part.v)) + (
            part.mtp_layers if s == last and part.mtp_expert_params > 0 else 0)
        if layers:
            alive = inflight_layers(plan, s, layers) / layers  # micro-batches in flight per layer
            acts += alive * (layers * (attn - saving) + n_moe * per_moe)
        return weights, grads, opt, acts, other + (buffers if n_moe else 0.0)
    return apply
