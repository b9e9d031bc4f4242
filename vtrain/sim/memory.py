"""Memory per GPU: weights, gradients, optimizer states, activations of the in-flight micro-batches.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models"), Sec. 4, per layer and micro-batch (fp16, dropout masks 1 byte):
  no recompute:        s·b·h·(10 + 24/t + 5·a·s/(h·t))      (TP, Eq. for tensor parallelism)
  + sequence parallel: s·b·h·(34 + 5·a·s/h) / t
  selective recompute: the 5·a·s/h term is dropped (Table 2)
  full recompute:      2·s·b·h (the layer input only; /t with SP)
The terms are generalised (GQA, SwiGLU, FFN width, no dropout, flash attention) by counting each
saved tensor; for GPT shapes they reduce exactly to the formulas above (tests check it).
In-flight micro-batches: 1F1B keeps p - s on stage s, GPipe all m, interleaved 1F1B keeps its warm-up
depth of model chunks + 1 (Narayanan et al. SC'21, Sec. 2.2.2; :func:`vtrain.sim.schedule.peak_inflight_chunks`).
"""
from __future__ import annotations

from typing import Tuple

from vtrain.graph.collectives import kv_features
from vtrain.workload.enums import CpComm, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec


def saved_linear_input_bytes(plan: ParallelPlan) -> float:
    """Bytes per element of a linear layer's saved input: 1 quantized in a low-precision run (Transformer
    Engine and torchao keep the FP8 copy for the weight gradient), else the activation dtype; torchao's
    rowwise recipe saves the high-precision input and casts it again in backward
    (float8_linear.manual_float8_matmul_with_args_in_hp)."""
    return 1 if plan.precision.low and plan.precision != Precision.FP8_ROWWISE else plan.dtype_bytes


def layer_activation_bytes(model: ModelSpec, plan: ParallelPlan, recompute: Recompute | None = None,
                           keeps_unread: bool = True) -> float:
    """Activation bytes one transformer layer saves for backward, per micro-batch, per GPU.

    Per Korthikanti et al.'s tensors: the two norm inputs, the QKV and FC1 inputs (replicated over TP unless
    sequence parallel), Q, K, V, the projection input, the MLP activation input(s) and the FC2 input (split
    over TP), dropout masks, and the attention scores (unfused) or the log-sum-exp (flash). With context
    parallelism each rank holds s/cp tokens; with a low-precision format the linear layers save their
    inputs quantized (1 byte: Transformer Engine and torchao keep the FP8 copy for the weight gradient).
    ``keeps_unread`` (:attr:`StackSpec.sac_keeps_unread`): per-op checkpointing also keeps the saved matmul
    output no backward reads (the down projection's, torchtitan's 7th matmul)."""
    rc = plan.recompute if recompute is None else recompute
    s_full, b, t, dt = plan.seq_len, plan.micro_batch_size, plan.tp, plan.dtype_bytes
    s = s_full // plan.cp
    h, f, a = model.hidden_size, model.ffn_hidden_size, model.num_heads
    sbh = float(s * b * h)
    sp_div = t if plan.sequence_parallel else 1
    if rc == Recompute.FULL:
        return dt * sbh / sp_div
    if rc == Recompute.SELECTIVE_OP:  # the block input and the outputs of the saved matmuls and attention
        # wq, wv, w1, w2 | qkv, fc1, fc2; none when the GEMM is not aten.mm (NVFP4: Precision.gemm_is_aten_mm);
        # the down projection's output (w2 | fc2, h) is read by no backward: a compiled block does not keep it
        unread = h if keeps_unread else 0
        saved_mm = ((h + unread + model.kv_size + f) if model.gated_mlp else (h + unread + 2 * model.kv_size + f)) \
            if plan.precision.gemm_is_aten_mm else 0
        lse = float(a * s * b) * 4.0 / t
        return dt * 2 * sbh / sp_div + dt * float(s * b) * saved_mm / t + lse
    lin = saved_linear_input_bytes(plan)
    mask = 1 if model.dropout > 0 else 0
    replicated = (2 * dt + 2 * lin + 2 * mask) * sbh  # 2 norm inputs, QKV and FC1 inputs, 2 dropout masks
    gate = 2 if model.gated_mlp else 1
    sharded = float(s * b) * (dt * (h + 2 * model.kv_size + gate * f) + lin * (h + f))
    scores = 0.0
    if not plan.flash_attention and rc != Recompute.SELECTIVE:
        scores = float(a * s * s * b) * (dt + (mask + dt if mask else 0))  # softmax out, mask, dropout out
    elif plan.flash_attention:
        scores = float(a * s * b) * 4.0  # log-sum-exp statistics (fp32)
    return replicated / sp_div + (sharded + scores) / t


# torch.distributed.tensor.parallel.loss (_nll_loss_and_log_softmax_backward: (grad_input + exp(x)) * grad):
# the backward holds the saved fp32 log-probabilities x, the zeros grad_input, exp(x) and their sum at once
LOSS_PARALLEL_BYTES_PER_LOGIT = 16.0


def loss_bytes_per_logit(plan: ParallelPlan, stack: StackSpec) -> float:
    """Bytes the loss holds per logit at its peak: DTensor's loss_parallel with tp > 1
    (:attr:`StackSpec.eager_loss_parallel`: unless the loss is fused), else the stack's
    ``loss_bytes_per_logit`` (default: the activation dtype + 4, Megatron's fused vocab-parallel loss)."""
    if stack.eager_loss_parallel and plan.tp > 1:
        return LOSS_PARALLEL_BYTES_PER_LOGIT
    return stack.loss_bytes_per_logit if stack.loss_bytes_per_logit is not None else plan.dtype_bytes + 4


def cp_gathered_kv_bytes(model: ModelSpec, plan: ParallelPlan, expands_kv: bool = False) -> float:
    """The other CP ranks' K/V that an all-gather context parallelism holds beside its own while a layer's
    attention runs ((cp - 1) / cp of the sequence's K/V on this TP rank; freed after the attention, so one
    layer's at a time); a ring (p2p) holds one block in flight, left out."""
    if plan.cp == 1 or plan.cp_comm != CpComm.ALLGATHER:
        return 0.0
    full = plan.micro_batch_size * plan.seq_len * kv_features(model, expands_kv) / plan.tp * plan.dtype_bytes
    return full * (plan.cp - 1) / plan.cp


def inflight_layers(plan: ParallelPlan, stage: int, layers_per_stage: int, chunk_layers: Tuple[int, ...] = ()
                    ) -> float:
    """Layer activations alive at the peak of the schedule on ``stage`` (in units of one layer·mb): the
    schedule's peak chunk activations (:func:`vtrain.sim.schedule.peak_inflight_chunks`), each of the
    stage's layers / its chunks; interleaved chunks of unequal depth (``chunk_layers``, per chunk of the
    stage) are walked through the stage's order (:func:`vtrain.sim.schedule.peak_inflight_layers`)."""
    from vtrain.sim.schedule import peak_inflight_chunks, peak_inflight_layers

    v = plan.chunks
    if plan.schedule == Schedule.INTERLEAVED and v > 1 and len(set(chunk_layers)) > 1:
        return float(peak_inflight_layers(plan.pp, v, plan.num_microbatches, stage, tuple(chunk_layers),
                                          plan.microbatch_group_size_per_vp_stage, plan.overlap_moe_comm))
    alive = peak_inflight_chunks(plan.schedule, plan.pp, v, plan.num_microbatches, stage,
                                 plan.microbatch_group_size_per_vp_stage, plan.overlap_moe_comm)
    return float(alive * layers_per_stage / v)


def state_bytes_per_param(plan: ParallelPlan, shards: int = 0, masters_sharded: bool = False
                          ) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter for mixed-precision Adam, per GPU.

    bf16/fp16 weights (2), gradients (:attr:`ParallelPlan.grad_bytes`: fp32 main grads with bf16, as
    Megatron-LM and FSDP's fp32 reduce accumulate them; 2 with fp16 or ``fp32_grads=false``), fp32 master
    weights + Adam m, v (12; 8 in pure fp32; m and v 2 B each with ``optimizer_moments=bf16``). ZeRO
    (Rajbhandari et al. 2020, Sec. 5) shards over the dp_shard x cp ranks: stage 1 (Megatron's distributed
    optimizer) the optimizer states, stage 2 also the gradients, stage 3 (FSDP) also the weights.
    ``masters_sharded`` (``StackSpec.fsdp_fp32_shards``): under stage 3 the sharded parameters are the fp32
    masters themselves (FSDP2's mixed precision casts them to bf16 only when gathered), so no low-precision
    shard is held beside them.
    """
    moments = 4.0 if plan.optimizer_moments == "bf16" else 8.0  # m + v
    grads = plan.grad_bytes
    if plan.precision == Precision.FP32:
        weights, opt = 4.0, moments
    else:
        weights, opt = 2.0, 4.0 + moments
    stage, n = plan.sharding_stage, shards or plan.dp_shard * plan.cp  # shards: the group (experts: edp)
    if stage >= 1:
        opt /= n
    if stage >= 2:
        grads /= n
    if stage >= 3:
        weights = 0.0 if masters_sharded and plan.precision != Precision.FP32 else weights / n
    return weights, grads, opt


def fp8_weight_cache_bytes_per_param(plan: ParallelPlan, stack: StackSpec) -> float:
    """Bytes per linear-layer parameter held beside its weight for the low-precision GEMMs, per GPU.

    Transformer Engine keeps the quantized weight and its transpose (Blackwell: row- and column-wise copies)
    across micro-batches (``StackSpec.fp8_weight_cache``): two operands of ``gemm_operand_bytes`` each (block
    scales, 1/32 of an MXFP8 copy, left out). With FP8 parameters (``StackSpec.fp8_params``) the FP8 weight
    and its transpose are the weight itself, 1 + 1 B in place of the bf16 weight's 2: nothing beside it.
    ZeRO-3 gathers each layer per use, and so keeps no cache."""
    if not (plan.precision.low and stack.fp8_weight_cache and plan.sharding_stage < 3):
        return 0.0
    operand = plan.precision.gemm_operand_bytes
    return 0.0 if stack.fp8_params and operand == 1.0 else 2.0 * operand


def sharded_working_bytes(layer_params: float, stage_layers: int, plan: ParallelPlan,
                          deferred: bool = False) -> tuple[float, float]:
    """(weights, gradients) bytes ZeRO-3 holds unsharded: the gathered layer and the prefetched next one (all
    the stage's layers between forward and backward without reshard_after_forward), and the unsharded
    gradients of the two layers in flight before their reduce-scatter (``deferred``: of all the stage's
    layers, accumulated in the fp32 reduce dtype until the one reduce-scatter; comm.sharding.deferred_sync)."""
    if plan.sharding_stage < 3:
        return 0.0, 0.0
    gathered = 2 if plan.reshard_after_forward else max(2, stage_layers)
    return gathered * layer_params * plan.dtype_bytes, (max(2, stage_layers) if deferred else 2) * layer_params * 4.0


def kept_layers(plan: ParallelPlan, stage: int, layers_per_stage: int, chunk_layers: Tuple[int, ...] = ()) -> float:
    """Layer activations in HBM at the peak: the in-flight ones (:func:`inflight_layers`) less the layers whose
    activations Transformer Engine's offload has copied to the host (``plan.offload_layers``, pp=1: one
    micro-batch in flight). TE's OffloadSynchronizer (cpu_offload.py, default schedule) offloads layers 0 .. n-1
    and frees layer i's GPU copy before layer L - n + i's forward, so the end of the forward holds L - n layers."""
    return max(0.0, inflight_layers(plan, stage, layers_per_stage, chunk_layers) - plan.offload_layers)
