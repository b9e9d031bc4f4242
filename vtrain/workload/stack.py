"""The software stack that runs the training: the host-side costs of its framework and what it reserves.

These belong to the software (Megatron-DeepSpeed 2022, Megatron-Core + Transformer Engine, FSDP2 in
torchtitan, DeepSpeed), not to the GPU: the same A100 issues a kernel in ~70 µs of Python in one stack
and in a few µs in another (CUDA graphs, fused kernels). Configs in ``conf/stack/``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from vtrain.workload.fields import FRACTION, Domain, spec

if TYPE_CHECKING:
    from vtrain.workload.system import GpuSpec

# Physical ranges of a framework's constants (beyond them a prediction is meaningless, and its arithmetic
# overflows): host times up to 1 s per op or iteration, traffic factors up to 100x, bytes up to 1 KiB per
# parameter or logit, reserved memory up to 1 TiB
SECONDS = Domain(lo=0.0, hi=1.0)
FACTOR = Domain(lo=0.0, hi=100.0, lo_open=True)
BYTES_PER_ITEM = Domain(lo=0.0, hi=1024.0, lo_open=True)
GIB_RESERVED = Domain(lo=0.0, hi=1024.0)
# a fused-attention backward runs 2.5x its forward's FLOPs: 5 GEMMs against 2 (Dao 2023, Sec. 3; ops.FlashAttention)
ATTENTION_BACKWARD_FLOPS = 2.5


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSpec:
    name: str = spec(doc="stack/ config name")
    description: str = spec("", doc="the framework and versions these constants describe")
    host_time_per_kernel_s: float = spec(12.0e-6, unit="s", domain=SECONDS,
                                         doc="host time (Python, autograd, launch) to issue one modelled op")
    host_time_per_eager_op_s: Optional[float] = spec(
        None, unit="s", domain=SECONDS, none_means="host_time_per_kernel_s",
        doc="host time to issue one eager PyTorch op the graph marks eager (MemoryOp.eager: a tensor op called "
            "inside a framework function, its dispatch and launch without a module's overhead)")
    host_time_per_collective_s: float = spec(0.0, unit="s", domain=SECONDS,
                                             doc="extra host time per TP collective (wrapper, NCCL enqueue)")
    optimizer_bytes_per_param: float = spec(40.0, unit="B", domain=BYTES_PER_ITEM,
                                            doc="HBM traffic of the mixed-precision Adam step per parameter")
    optimizer_bandwidth_fraction: Optional[float] = spec(
        None, domain=Domain(lo=0.0, hi=1.0, lo_open=True), none_means="the GPU's memory_efficiency",
        doc="fraction of the GPU's HBM bandwidth the optimizer step's kernels move their bytes at (a fused "
            "multi-tensor Adam is not an element-wise kernel)")
    iteration_overhead_s: float = spec(0.0, unit="s", domain=SECONDS,
                                       doc="fixed host time per iteration (logging, loss scale, sync)")
    microbatch_overhead_s: float = spec(0.0, unit="s", domain=SECONDS,
                                        doc="host time per micro-batch per model chunk (forward call, loss)")
    elementwise_traffic: float = spec(1.0, domain=FACTOR,
                                      doc="HBM traffic and kernels of the memory-bound ops relative to fused "
                                          "kernels (Megatron/TE: 1; eager PyTorch runs each in several kernels)")
    attention_kernel_efficiency: float = spec(1.0, domain=FRACTION,
                                              doc="the framework's fused-attention kernel relative to the GPU's "
                                                  "best (gpu.flash_attention_efficiency), on a GPU whose "
                                                  "architecture attention_kernel_efficiency_by_architecture "
                                                  "does not list")
    attention_kernel_efficiency_by_architecture: Dict[str, float] = spec(
        factory=dict, domain=FRACTION,
        doc="the same ratio measured on one GPU architecture (gpu.architecture: hopper, blackwell, ...), which "
            "replaces attention_kernel_efficiency there (bench/fit_attention.py --write)")
    attention_backward_ratio_by_architecture: Dict[str, float] = spec(
        factory=dict, domain=FRACTION,
        doc="the fused-attention kernel's backward rate over its forward rate on one GPU architecture: the "
            "step's factor (attention_kernel_efficiency) stays, split between the passes; unlisted: one rate")
    gemm_curve_fitted_on: str = spec(
        "", doc="the GPU architecture (gpu.architecture) whose GEMM curve was fitted to this stack's own measured "
                "runs: there its GEMMs run at the curve itself, with no gpu.sustained_gemm_fraction discount "
                "(the A100 curve is vTrain's single-node runs' rate; other A100 stacks sustain the fraction the "
                "Megatron-LM weak-scaling runs show); '' for none")
    fuse_elementwise: bool = spec(False, doc="a compiler fuses adjacent memory-bound ops into one kernel "
                                             "(torch.compile); see vtrain.graph.fusion")
    sac_keeps_unread: bool = spec(True, doc="per-op selective checkpointing keeps every output its policy names, "
                                            "read by the backward or not (eager torch.utils.checkpoint caches "
                                            "them); a compiled block keeps only what its backward graph reads "
                                            "(AOTAutograd's partitioner): the last matmul's output, the MLP's "
                                            "down projection, is not")
    fused_loss: bool = spec(False, doc="the cross-entropy is one kernel over the bf16 logits (flash-attn's "
                                       "CrossEntropyLoss, a compiled loss): its forward reads the logits once, "
                                       "its backward reads them and writes their gradient; else the fp32 "
                                       "cross-entropy kernels of Megatron's vocab-parallel loss")
    loss_parallel: bool = spec(False, doc="with tp > 1 the loss runs vocab-parallel in eager DTensor ops "
                                          "(torch.distributed.tensor.parallel.loss_parallel, torchtitan's "
                                          "default with TP): six fp32 kernels forward and five backward, and "
                                          "16 B per logit at the backward's peak (vtrain.sim.memory."
                                          "loss_bytes_per_logit); a fused loss (fused_loss) takes precedence")
    fp8_weight_cache: bool = spec(False, doc="keeps FP8 weights (and transposes) across micro-batches "
                                             "(Transformer Engine); torchao casts them per forward")
    fp8_params: bool = spec(False, doc="with an FP8 format the linear layers' weights are stored in FP8, not "
                                       "bf16 (Megatron's --fp8-param-gather, TE's fp8_model_init): the FP8 "
                                       "weight and its cached transpose replace the bf16 weight and its FP8 "
                                       "copies; the fp32 master weights stay in the optimizer")
    pipeline_defers_fsdp_sync: bool = spec(
        False, doc="under a pipeline schedule (pp > 1), ZeRO-3 gradients accumulate unsharded over the "
                   "micro-batches and reduce-scatter once after a stage's last backward, and parameters kept "
                   "gathered (reshard_after_forward=false) are gathered once per iteration "
                   "(torch.distributed.pipelining with FSDP2); else both happen per layer and micro-batch")
    fsdp_copy_out: bool = spec(False, doc="ZeRO-3 copies each gathered layer out of the all-gather buffer into "
                                          "its parameters on the compute stream (FSDP2's "
                                          "foreach_all_gather_copy_out: one read and one write of the layer)")
    train_metric_passes: int = spec(
        0, domain=Domain(lo=0, hi=16, integer=True),
        doc="cross-entropy metrics the trainer evaluates on each micro-batch's logits after its backward, no "
            "grad (Composer's train metrics: LanguageCrossEntropy and LanguagePerplexity, each an eager "
            "torch cross-entropy under autocast): each pass casts the bf16 logits to fp32 and runs an fp32 "
            "log-softmax over them (vtrain.graph.builder.build_head)")
    loss_bytes_per_logit: Optional[float] = spec(
        None, unit="B", domain=BYTES_PER_ITEM,
        none_means="the activation dtype + 4 (the logits and their fp32 softmax: Megatron's fused vocab-parallel "
                   "cross-entropy)",
        doc="memory the output layer and the loss hold per logit at their peak (the last stage); with tp > 1 "
            "a stack with loss_parallel (and no fused_loss) holds loss_parallel's 16 B instead")
    attention_expands_kv: bool = spec(False, doc="grouped K/V heads are repeated to every query head before the "
                                                 "attention kernel (torchtitan's Llama: repeat_kv before SDPA), "
                                                 "so context parallelism exchanges the repeated heads")
    cp_grads_fp32: bool = spec(False, doc="context parallelism reduces the K/V gradients in fp32 (PyTorch's "
                                          "_cp_options.convert_to_f32)")
    cp_ring_merge: bool = spec(
        False, doc="context parallelism runs one attention kernel per ring step and merges the steps in eager "
                   "element-wise kernels: the running output is rescaled by each step's log-sum-exp, and the "
                   "query and K/V gradients are accumulated and passed on, in fp32 with cp_grads_fp32 "
                   "(PyTorch's _templated_ring_attention, _SDPAMerger); Megatron-Core/TE fuse the correction "
                   "(vtrain.graph.cp_ring)")
    recompute_fused_attention: bool = spec(
        False, doc="selective recompute of the attention core (core_attn) runs the fused attention kernel's "
                   "forward again before its backward, context-parallel KV exchange included (Megatron-Core: "
                   "Attention._checkpointed_attention_forward around TE's DotProductAttention); legacy "
                   "Megatron-LM and Megatron-DeepSpeed leave flash attention out of the checkpoint")
    tp_layout_copies: bool = spec(
        False, doc="activations are batch-first ([b, s, h]) and sequence parallelism shards dim 1, so each "
                   "non-overlapped TP all-gather is followed and each reduce-scatter preceded by a chunk-and-cat "
                   "copy of the full activation (DTensor in torchtitan; Megatron's [s, b, h] needs none): "
                   "vtrain.graph.layout")
    tp_overlap_symm_mem: bool = spec(
        False, doc="TP-communication overlap runs on PyTorch's symmetric memory (async TP: "
                   "torch.distributed._symmetric_memory): each fused all-gather-matmul first copies the local "
                   "shard into the symmetric buffer and waits at a barrier before its first matmul, and each "
                   "fused matmul-reduce-scatter ends with a kernel that sums the tp partial products on the "
                   "compute stream (TE userbuffers reduce inside their communication kernels): vtrain.graph.layout")
    tp_fp8_all_gather: bool = spec(
        False, doc="with per-tensor FP8 (precision=fp8) the sequence-parallel TP all-gathers (the forward input "
                   "of a column-parallel block, the backward output gradient of a row-parallel one) move the "
                   "1-byte quantized tensor, cast before the gather (torchao's Float8ColwiseParallel, "
                   "Float8RowwiseParallel, PrepareFloat8ModuleInput; torchtitan uses them for tensorwise "
                   "float8 only: rowwise and MX recipes gather in bf16); reduce-scatters stay bf16")
    separate_projections: bool = spec(
        False, doc="the attention's q, k, v and a gated MLP's gate and up projections are separate linear layers "
                   "(torchtitan's Llama: wq, wk, wv, w1, w3), each a GEMM of its own on the shared input, their "
                   "input gradients summed; Megatron fuses them into one QKV and one FC1 GEMM. With TP overlap "
                   "that sum's reduce-scatter runs unfused: Inductor's micro-pipeline TP pass fuses a "
                   "reduce-scatter only with the single matmul producing its input")
    selective_is_per_op: bool = spec(False, doc="a measured row's 'selective' recompute is the stack's per-op "
                                                "selective checkpointing (torchtitan: activation_checkpoint.mode = "
                                                "selective with selective_ac_option = op, its default)")
    zero_stage: Optional[int] = spec(
        None, domain=Domain(lo=0, hi=3, integer=True), none_means="the row defaults' (the plan's own)",
        doc="the ZeRO stage a measured row on this stack ran with when it does not say (task=validate; FSDP2's "
            "fully_shard is how torchtitan, and FULL_SHARD how llm-foundry, train: 3)")
    pipeline_max_zero_stage: Optional[int] = spec(
        None, domain=Domain(lo=0, hi=3, integer=True), none_means="any: the stack shards under a pipeline too",
        doc="the highest ZeRO stage the stack runs with pp > 1 (DeepSpeed's PipelineEngine: ZeRO-2 and ZeRO-3 are "
            "incompatible with pipeline parallelism)")
    fsdp_fp32_shards: bool = spec(False, doc="under ZeRO-3 the sharded parameters are the fp32 masters (FSDP2's "
                                             "mixed precision): no low-precision shard beside them")
    grouped_gemm_streams: int = spec(
        0, domain=Domain(lo=0, hi=64, integer=True),
        doc="MoE: how the local experts' GEMMs run. 0: one grouped kernel for all of them (torch._grouped_mm, "
            "CUTLASS grouped GEMM); n: one GEMM launch per expert over n CUDA streams (Transformer Engine's "
            "GroupedLinear: multi_stream_cublas_gemm over its 4 compute streams; vtrain.graph.moe)")
    moe_router_fusion: bool = spec(False, doc="MoE: the router's score function, top-k and load-balancing loss run "
                                              "as Transformer Engine's fused kernels (Megatron-Core's "
                                              "moe_router_fusion), else as eager PyTorch ops (vtrain.graph.router)")
    expert_wgrad_main_grad: bool = spec(False, doc="MoE: the experts' weight gradients accumulate into fp32 main "
                                                   "gradients inside the GEMM (Megatron-Core's "
                                                   "gradient_accumulation_fusion: read and write 8 B per element)")
    ep_overlap_hidden_share: float = spec(
        1.0, domain=FRACTION,
        doc="MoE with overlap_moe_comm (Megatron-Core's combined 1F1B): the share of a fused forward/backward "
            "pair's all-to-all that runs beside the other pass's compute; the rest runs exposed (vtrain.sim.overlap)")
    ep_overlap_node_host_s: float = spec(
        0.0, unit="s", domain=SECONDS,
        doc="MoE with overlap_moe_comm: host time of one schedule-node call of Megatron-Core's combined 1F1B (event "
            "wait and record, stream switch, detached inputs, a separate autograd run per backward node; 4 calls "
            "per MoE layer in forward, 6 in backward: vtrain.sim.schedule_nodes)")
    te_quantization: bool = spec(False, doc="low-precision casts as Transformer Engine runs them "
                                            "(vtrain.graph.te_quant): the norm before the QKV and FC1 GEMMs writes "
                                            "their quantized input (LayerNormLinear), and on Blackwell a per-tensor "
                                            "FP8 tensor serves both GEMM layouts (no transposed copy)")
    cublas_rowwise_fp8: bool = spec(
        False, doc="torch._scaled_mm runs rowwise-scaled FP8 (torchao's rowwise recipe) on cuBLASLt, as per-tensor "
                   "FP8: a PyTorch built with cuBLAS >= 12.9, on Hopper; false: on PyTorch's own CUTLASS kernel "
                   "(aten RowwiseScaledMM.cu, priced at gpu.rowwise_cutlass_gemm_ratio), which an older build runs "
                   "on every GPU and every build runs on Blackwell (cuBLAS takes no 2-D row scales there)")
    torchao_mx_casts: bool = spec(False, doc="MXFP8 casts as torchao's mx_mm runs them (vtrain.graph.torchao_mx): "
                                             "each GEMM casts its bf16 operands itself, two casts in forward and "
                                             "four in backward per linear layer")
    nvfp4_bf16_tail_fraction: float = spec(
        0.0, domain=Domain(lo=0.0, hi=1.0),
        doc="with precision=nvfp4 the last ceil(num_layers x this) decoder layers stay in bf16 with the output layer "
            "(torchtitan's NVFP4 recipe, llama3_8b_nvfp4_mixed: nvfp4_bf16_tail_fqns(n_layers, 0.15); "
            "vtrain.graph.builder.tail_layers); 0: every layer in NVFP4")
    memory_reserved_gib: float = spec(2.0, unit="GiB", domain=GIB_RESERVED,
                                      doc="CUDA context, NCCL buffers, allocator fragmentation, workspaces")
    provenance: Dict[str, str] = spec(factory=dict, doc="per constant: 'fitted: <data>', 'transferred from: "
                                                        "<stack>' or the argument for its value")

    @property
    def memory_reserved_bytes(self) -> float:
        return self.memory_reserved_gib * 2**30

    @property
    def eager_loss_parallel(self) -> bool:
        """Whether, with tp > 1, the loss runs DTensor's eager loss_parallel kernels: a fused loss takes
        precedence (the compiled loss fuses them; flash-attn's is one kernel)."""
        return self.loss_parallel and not self.fused_loss

    def attention_factor(self, architecture: str) -> float:
        """This stack's fused-attention kernel against the GPU's reference kernel, on ``architecture``: the
        measured ratio where one is listed, else the general one."""
        return self.attention_kernel_efficiency_by_architecture.get(architecture, self.attention_kernel_efficiency)

    def attention_pass_factors(self, architecture: str) -> Tuple[float, float]:
        """(forward, backward) factors of this stack's fused-attention kernel on ``architecture``: backward =
        ratio x forward, their step time that of :meth:`attention_factor` (the backward runs 2.5x the forward's
        FLOPs, Dao 2023 Sec. 3): (1 + 2.5) / f = 1 / fwd + 2.5 / (ratio x fwd)."""
        f = self.attention_factor(architecture)
        ratio = self.attention_backward_ratio_by_architecture.get(architecture, 1.0)
        fwd = f * (1.0 + ATTENTION_BACKWARD_FLOPS / ratio) / (1.0 + ATTENTION_BACKWARD_FLOPS)
        return fwd, ratio * fwd

    def rowwise_fp8_on_cutlass(self, architecture: str) -> bool:
        """Whether torch._scaled_mm runs a rowwise-scaled FP8 GEMM on PyTorch's CUTLASS kernel on ``architecture``
        (aten/src/ATen/native/cuda/Blas.cpp: cuBLASLt only on Hopper with cuBLAS >= 12.9)."""
        return not (self.cublas_rowwise_fp8 and architecture == "hopper")

    def sustained_gemm_fraction(self, gpu: "GpuSpec") -> float:
        """The share of ``gpu``'s GEMM curve this stack's GEMMs sustain inside a training step: 1 on the
        architecture whose curve was fitted to this stack's runs (:attr:`gemm_curve_fitted_on`), else the GPU's."""
        return 1.0 if self.gemm_curve_fitted_on and gpu.architecture == self.gemm_curve_fitted_on \
            else gpu.sustained_gemm_fraction

    def provenance_on(self, architecture: str) -> Dict[str, str]:
        """The provenance of the constants a plan on ``architecture`` rests on: all but the one of the two
        attention factors :meth:`attention_factor` does not use there."""
        measured_here = architecture in self.attention_kernel_efficiency_by_architecture
        unused = "attention_kernel_efficiency" if measured_here else "attention_kernel_efficiency_by_architecture"
        return {k: v for k, v in self.provenance.items() if k != unused}
