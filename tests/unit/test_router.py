"""The MoE router's kernels as Megatron-Core runs them (vtrain.graph.router; docs/moe.md "The router"): the fused
and eager score/top-k, the token-drop capacity mask, the load-balancing loss, the expert bias, counted by hand from
megatron/core/transformer/moe/router.py and moe_utils.py."""
from __future__ import annotations

from dataclasses import replace

from vtrain.graph.ops import Collective, CollectiveKind, MemoryOp
from vtrain.graph.router import (
    MULTIBLOCK_TOPK_KERNELS,
    dispatch_bookkeeping,
    gating_backward_casts,
    router_ops,
    topk_kernels,
)
from vtrain.workload.enums import MoeAuxLoss, MoeDispatcher, MoeRouter
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

# Qwen3-30B-A3B's router (conf/model/qwen3_30b_a3b.yaml): hidden 2048, 128 experts, top-8, softmax, aux_loss
QWEN3_30B = ModelSpec(name="qwen3-30b", num_layers=4, hidden_size=2048, num_heads=32, num_kv_heads=4,
                      ffn_hidden_size=6144, vocab_size=151936, max_seq_len=4096, gated_mlp=True, num_experts=128,
                      moe_top_k=8, moe_ffn_hidden_size=768)
# DeepSeek-V3's (conf/model/deepseek_v3.yaml): 256 experts, top-8, sigmoid with expert bias, seq_aux_loss
DSV3 = replace(QWEN3_30B, name="dsv3", hidden_size=7168, num_experts=256, moe_router=MoeRouter.SIGMOID,
               moe_aux_loss=MoeAuxLoss.SEQ)
T = 4096  # one 4,096-token sequence per micro-batch
S = T * 4.0  # bytes of one token's fp32 scores, per expert (below: x experts)


def _plan(tp: int = 1) -> ParallelPlan:
    return ParallelPlan(tp=tp, dp=8, pp=1, ep=8, micro_batch_size=1, global_batch_size=8, seq_len=T,
                        sequence_parallel=tp > 1)


def _kernels(ops: list) -> int:
    return sum(op.kernels for op in ops if isinstance(op, MemoryOp))


def test_fused_router_is_one_kernel_each_way_plus_the_aux_loss():
    fwd, bwd = router_ops(QWEN3_30B, _plan(), T, fused=True)
    assert [op.name for op in fwd] == ["moe.router.topk", "moe.router.aux.scores", "moe.router.aux.loss"]
    # fused top-k 1; the aux loss' scores 1, routing_map.sum + fused_moe_aux_loss 2, / coefficient + tracker add 2
    assert _kernels(fwd) == 1 + 1 + 2 + 2
    # the auto-scaler's ones_like x scale 2 + the loss' backward 1; the scores' backward 1 + the logits' grad sum 1;
    # the fused top-k's backward 1
    assert _kernels(bwd) == 3 + 2 + 1
    assert all(op.eager for op in fwd + bwd)  # PyTorch ops issued from Megatron-Core's Python
    topk = fwd[0]
    assert topk.bytes == 3 * 128 * S + 128 * T  # read the logits; write probabilities, intermediate, bool map
    by = {op.name: op for op in bwd}
    # the fused score kernel's backward: read the saved scores and the gradient, write the logits' (3 x the fp32
    # scores), then the logits' two gradients summed (3 more); the loss' backward reads the scores once
    assert by["moe.router.aux.scores.bwd"].bytes == 6 * 128 * S
    assert by["moe.router.aux.loss.bwd"].bytes == 128 * S


def test_gpt_oss_has_no_balance_loss_and_the_sigmoid_router_counts_its_expert_bias():
    fwd, bwd = router_ops(replace(QWEN3_30B, moe_aux_loss=MoeAuxLoss.NONE), _plan(), T, fused=True)
    assert [op.name for op in fwd] == ["moe.router.topk"] and [op.name for op in bwd] == ["moe.router.topk.bwd"]
    fwd, _ = router_ops(DSV3, _plan(), T, fused=True)
    # seq_aux_loss divides by the batch (one more scalar kernel); the expert bias' routing_map.sum and add
    assert _kernels(fwd) == 1 + 1 + 2 + 3 + 2
    assert fwd[-1].name == "moe.router.expert_bias"


def test_eager_router_as_megatron_core_runs_it_without_moe_router_fusion():
    fwd, bwd = router_ops(QWEN3_30B, _plan(), T, fused=False)
    # top-k + softmax of the k, then zeros_like, scatter, zeros_like, .int(), scatter, .bool()
    assert fwd[0].kernels == 2 + 6
    # the aux loss: softmax, top-k, zeros_like, .int(), scatter, .bool(); probs.sum, x, sum, x coefficient,
    # routing_map.sum + 2 logging kernels
    assert _kernels(fwd) == 8 + 6 + 5 + 2
    fwd, _ = router_ops(DSV3, _plan(), T, fused=False)
    assert fwd[0].kernels == 8 + 6  # sigmoid, + bias, top-k, gather, sum, + eps, div, x scale, then the map


def test_token_drop_is_a_topk_over_the_tokens_per_expert():
    # PyTorch's thresholds: 256 slices of 4,096 take the multi-block radix select, 128 of 4,096 one block each
    assert topk_kernels(256, 4096) == MULTIBLOCK_TOPK_KERNELS == 14
    assert topk_kernels(128, 4096) == 1 and topk_kernels(128, 16384) == MULTIBLOCK_TOPK_KERNELS
    fwd, bwd = router_ops(replace(DSV3, capacity_factor=1.0), _plan(), T, fused=True)
    names = [op.name for op in fwd]
    assert names[1:3] == ["moe.router.capacity.topk", "moe.router.capacity.mask"]
    assert fwd[1].kernels == 14 and fwd[2].kernels == 4  # zeros_like, scatter, .bool(), probs x mask
    assert "moe.router.capacity.mask.bwd" in [op.name for op in bwd]
    # a capacity above the tokens keeps every token: no mask (get_capacity > num_tokens)
    fwd, _ = router_ops(replace(DSV3, capacity_factor=64.0), _plan(), T, fused=True)
    assert "moe.router.capacity.topk" not in [op.name for op in fwd]


def test_tensor_parallel_aux_loss_all_reduces_the_tokens_per_expert():
    fwd, _ = router_ops(QWEN3_30B, _plan(tp=2), T // 2, fused=True)
    coll = [op for op in fwd if isinstance(op, Collective)]
    assert len(coll) == 1 and coll[0].bytes == 8 * 128 and coll[0].group_size == 2  # E int64 counts
    assert not any(isinstance(op, Collective) for op in router_ops(QWEN3_30B, _plan(), T, fused=True)[0])


def test_all_to_all_dispatcher_gathers_the_tokens_per_expert_and_sends_the_probabilities():
    pre, probs, probs_b = dispatch_bookkeeping(QWEN3_30B, _plan())
    # routing_map.sum(dim=0), .long(), the per-rank sum; the all-gather of E int64 over EP 8; .contiguous() and
    # three sums of what came back
    assert [op.kernels for op in pre] == [3, 1, 4]
    gather = pre[1]
    assert isinstance(gather, Collective) and gather.kind == CollectiveKind.ALL_GATHER and gather.bytes == 8 * 128 * 8
    # the permuted probabilities, fp32, one per row: a second all-to-all each way
    assert [op.name for op in probs + probs_b] == ["moe.dispatch.probs", "moe.dispatch.probs.bwd"]
    assert probs[0].bytes == T * 8 * 4.0
    # padded to capacity: one fill, no gather
    pre, _, _ = dispatch_bookkeeping(replace(QWEN3_30B, capacity_factor=1.0), _plan())
    assert [op.name for op in pre] == ["moe.permute.capacity_fill"]


def test_flex_dispatcher_routing_metadata():
    # HybridEP: every forward all-gathers the EP group's bool routing maps (8 ranks x 4,096 tokens x 128 experts)
    # and runs its metadata-preprocessing kernel on them; then the tokens per expert are summed
    pre, after, back = dispatch_bookkeeping(QWEN3_30B, replace(_plan(), moe_dispatcher=MoeDispatcher.HYBRIDEP))
    gather = pre[0]
    assert isinstance(gather, Collective) and gather.kind == CollectiveKind.ALL_GATHER
    assert gather.bytes == 8 * T * 128 and pre[1].bytes == 8 * T * 128
    assert [op.name for op in after] == ["moe.dispatch.tokens_per_expert"] and back == []
    # DeepEP: top-k indices from the probabilities, get_dispatch_layout + notify_dispatch, the received multihot
    pre, after, back = dispatch_bookkeeping(QWEN3_30B, replace(_plan(), moe_dispatcher=MoeDispatcher.DEEPEP))
    assert [op.kernels for op in pre] == [1, 2] and [op.kernels for op in after + back] == [1, 1, 2]
    assert dispatch_bookkeeping(QWEN3_30B, replace(_plan(), ep=1, dp=8, moe_dispatcher=MoeDispatcher.DEEPEP)) \
        == ([], [], [])


def test_gating_backward_casts_the_input_and_weight_to_fp32_and_back():
    op = gating_backward_casts(DSV3, T)
    assert op.kernels == 4 and op.bytes == 12.0 * (T * 7168 + 256 * 7168)
