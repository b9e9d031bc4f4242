"""MoE placement as Megatron-Core runs it: DeepEP's deduplicated dispatch, the permutation kernels of each
dispatcher, Transformer Engine's per-expert grouped GEMM over its streams, the experts' fp32 main-gradient
accumulation, and the measured tables they are checked on (docs/moe.md)."""
from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import List, Optional, Tuple

import pytest

import vtrain.graph.builder  # noqa: F401  (import order: graph before comm)
from vtrain.comm.ep import deepep_wire_fraction, plan_ep_comms, remote_node_fraction
from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.cost.collectives import GroupPlacement
from vtrain.graph.moe import MAIN_GRAD_BYTES, GroupedGemm, moe_block, permutations
from vtrain.graph.options import GraphOptions
from vtrain.workload.enums import MoeDispatcher
from vtrain.workload.model import ModelSpec
from vtrain.workload.moe_load import distinct_rank_fraction
from vtrain.workload.plan import ParallelPlan

# Qwen3-235B-A22B's MoE shapes (conf/model/qwen3_235b_a22b.yaml): hidden 4096, 128 experts of 1536, top-8
QWEN3 = ModelSpec(name="qwen3-moe", num_layers=4, hidden_size=4096, num_heads=64, num_kv_heads=4,
                  ffn_hidden_size=12288, vocab_size=151936, max_seq_len=4096, gated_mlp=True, num_experts=128,
                  moe_top_k=8, moe_ffn_hidden_size=1536)


def plan(dispatcher: str, ep: int = 8, tp: int = 1, dp: int = 8, mb: int = 1) -> ParallelPlan:
    return ParallelPlan(tp=tp, dp=dp, pp=1, ep=ep, micro_batch_size=mb, global_batch_size=dp * mb, seq_len=4096,
                        moe_dispatcher=MoeDispatcher(dispatcher), sequence_parallel=tp > 1)


def test_deepep_sends_each_token_once_per_rank_inside_a_node():
    # C(112, 8) / C(128, 8): the chance that none of a token's 8 experts is among one rank's 16
    miss = math.comb(112, 8) / math.comb(128, 8)
    assert distinct_rank_fraction(128, 8, 8) == pytest.approx(8 * (1 - miss) / 8)
    assert distinct_rank_fraction(128, 8, 8) == pytest.approx(0.667, abs=0.001)
    assert distinct_rank_fraction(128, 8, 1) == 1.0
    assert distinct_rank_fraction(8, 1, 8) == 1.0  # top-1: one copy, nothing to deduplicate
    # one NVLink domain: the per-rank fraction; across nodes the per-node one on the network
    assert deepep_wire_fraction(128, 8, 8, 1) == distinct_rank_fraction(128, 8, 8)
    assert deepep_wire_fraction(128, 8, 32, 4) == remote_node_fraction(128, 8, 4)


def test_deepep_across_nodes_moves_at_its_measured_rdma_rate():
    from vtrain.comm.ep import DEEPEP_RDMA_EFFICIENCY

    p = plan("deepep", ep=32, dp=32)
    four_nodes = GroupPlacement(32, 8)
    at_line_rate = plan_ep_comms(QWEN3, p, four_nodes, inter_a2a_efficiency=DEEPEP_RDMA_EFFICIENCY).enter[0]
    nccl_priced = plan_ep_comms(QWEN3, p, four_nodes, inter_a2a_efficiency=0.9605).enter[0]
    # the cluster prices the bytes at 0.9605 of the NIC: DeepEP's at 0.885 (DeepEP README, EP16/EP32 on CX7)
    assert nccl_priced.bytes == pytest.approx(at_line_rate.bytes * 0.9605 / 0.885)
    assert at_line_rate.bytes == pytest.approx(4096 * 8 * 4096 * 2.0 * remote_node_fraction(128, 8, 4))
    one_node = plan_ep_comms(QWEN3, plan("deepep"), GroupPlacement(8, 8), inter_a2a_efficiency=0.5).enter[0]
    assert one_node.bytes == pytest.approx(4096 * 8 * 4096 * 2.0 * distinct_rank_fraction(128, 8, 8))  # NVLink


def test_dispatch_bytes_by_dispatcher():
    p = plan("deepep")
    rows_bytes = 4096 * 8 * 4096 * 2.0  # tokens x k x h x bf16
    deepep = plan_ep_comms(QWEN3, p, GroupPlacement(8, 8)).enter[0]
    nccl = plan_ep_comms(QWEN3, replace(p, moe_dispatcher=MoeDispatcher.ALLTOALL), GroupPlacement(8, 8)).enter[0]
    assert nccl.bytes == pytest.approx(rows_bytes)
    assert deepep.bytes == pytest.approx(rows_bytes * distinct_rank_fraction(128, 8, 8))


def _names_bytes(ops: Tuple[object, ...]) -> List[Tuple[str, float, int]]:
    return [(op.name, op.bytes, op.kernels) for op in ops]  # type: ignore[attr-defined]


def test_alltoall_permutes_and_sorts_chunks_of_several_local_experts():
    tokens = 4096 * 4096 * 2.0  # one micro-batch's tokens of h in bf16
    rows = tokens * 8
    fwd, bwd = permutations(QWEN3, plan("alltoall"))
    assert _names_bytes(fwd.before_dispatch) == [("moe.permute", tokens + rows, 2)]  # multihot, permute
    assert _names_bytes(fwd.after_dispatch) == [("moe.sort_chunks", 2 * rows, 1)]  # 16 local experts
    assert _names_bytes(fwd.before_combine) == [("moe.unsort_chunks", 2 * rows, 1)]
    assert _names_bytes(fwd.after_combine) == [("moe.unpermute", rows + tokens, 1)]
    assert _names_bytes(bwd.after_dispatch) == [("moe.sort_chunks.bwd", 2 * rows, 1)]
    one_local = permutations(QWEN3, plan("alltoall", ep=128, dp=128))[0]  # one expert per rank: nothing to sort
    assert one_local.after_dispatch == () and one_local.before_combine == ()


def test_deepep_permutes_what_it_received_after_the_dispatch():
    rows = 4096 * 4096 * 2.0 * 8
    received = rows * distinct_rank_fraction(128, 8, 8)
    fwd, bwd = permutations(QWEN3, plan("deepep"))
    assert fwd.before_dispatch == () and fwd.after_combine == ()
    assert _names_bytes(fwd.after_dispatch) == [("moe.received.permute", received + rows, 2)]
    assert _names_bytes(fwd.before_combine) == [("moe.received.unpermute", rows + received, 1)]
    assert _names_bytes(bwd.before_combine) == [("moe.received.unpermute.bwd", received + rows, 2)]
    block = moe_block(QWEN3, plan("deepep"), *_comms(plan("deepep")))
    names = [op.name for op in block.forward]
    assert names.index("moe.dispatch") < names.index("moe.received.permute") < names.index("moe.expert.fc1")
    assert names.index("moe.received.unpermute") < names.index("moe.combine")
    # after the host sync: not part of the moe_preprocess CUDA graph (the all-to-all's permute before it is)
    from vtrain.graph.cuda_graphs import captured_ops

    captured = captured_ops(["moe_router", "moe_preprocess"], "moe")
    assert captured is not None
    assert not any(captured(op) for op in block.forward if op.name.startswith("moe.received"))
    a2a = moe_block(QWEN3, plan("alltoall"), *_comms(plan("alltoall")))
    assert [op.name for op in a2a.forward if captured(op)] == ["moe.router", "moe.router.topk", "moe.router.aux.scores",
                                                               "moe.router.aux.loss", "moe.permute"]


def _comms(p: ParallelPlan) -> Tuple[object, object]:
    from vtrain.comm.tp import plan_tp_comms
    from vtrain.workload.stack import StackSpec

    return plan_tp_comms(QWEN3, p, StackSpec(name="t")), plan_ep_comms(QWEN3, p, GroupPlacement(8, 8))


def test_expert_weight_gradient_into_fp32_main_grad():
    g = GroupedGemm("moe.expert.fc1.wgrad", m=4096, n=3072, k=512, batch=16, dtype_bytes=2)
    acc = replace(g, main_grad=True)
    assert g.bytes == 16 * (4096 * 512 + 512 * 3072 + 4096 * 3072) * 2.0
    assert acc.bytes == 16 * ((4096 * 512 + 512 * 3072) * 2.0 + 4096 * 3072 * MAIN_GRAD_BYTES)
    block = moe_block(QWEN3, plan("alltoall"), *_comms(plan("alltoall")),
                      GraphOptions(grouped_gemm_streams=4, expert_wgrad_main_grad=True))
    wgrads = [op for op in block.backward if op.name.endswith(".wgrad") and isinstance(op, GroupedGemm)]
    dgrads = [op for op in block.backward if op.name.endswith(".dgrad") and isinstance(op, GroupedGemm)]
    assert len(wgrads) == 2 and all(op.main_grad and op.streams == 4 for op in wgrads)
    assert dgrads and not any(op.main_grad for op in dgrads)


def _h100_cost() -> AnalyticalCostModel:
    from vtrain import compose
    from vtrain.config.build import build_workload

    cfg = compose(["+model=qwen3_235b_a22b", "+cluster=h100x1024", "stack=megatron_core_te", "parallelism.ep=8",
                   "parallelism.tp=2", "parallelism.pp=8"])
    return AnalyticalCostModel(build_workload(cfg))


def test_grouped_gemm_runs_rounds_of_four_expert_gemms_on_te():
    cost = _h100_cost()
    g = GroupedGemm("moe.expert.fc1", m=512, n=3072, k=4096, batch=16, dtype_bytes=2, streams=4)
    c = cost.curve
    per_round = 2.0 * 4 * 512 * 3072 * 4096 / (c.peak_flops_per_s * cost.sustained * c.efficiency(512, 3072, 4096, 4))
    assert cost.compute_time_s(g) == pytest.approx(4 * (c.fixed_time_s + per_round))
    # one grouped kernel (streams 0, torch._grouped_mm): one batched GEMM of the 16, one fixed time
    one = replace(g, streams=0)
    batched = 2.0 * 16 * 512 * 3072 * 4096 / (c.peak_flops_per_s * cost.sustained * c.efficiency(512, 3072, 4096, 16))
    assert cost.compute_time_s(one) == pytest.approx(c.fixed_time_s + batched)
    assert cost.compute_time_s(g) > cost.compute_time_s(one)
    assert g.kernels == one.kernels == 16  # the host launches one GEMM per expert either way
    # 6 local experts (Kimi-K2's 384 over EP64): a round of 4, then one of the 2 left
    six = replace(g, batch=6)
    last = 2.0 * 2 * 512 * 3072 * 4096 / (c.peak_flops_per_s * cost.sustained * c.efficiency(512, 3072, 4096, 2))
    assert cost.compute_time_s(six) == pytest.approx(c.fixed_time_s + per_round + c.fixed_time_s + last)


def test_stack_switches_are_megatron_core_te_only():
    from vtrain.config.build import stack_spec
    from vtrain.config.compose import load_stack_config
    from vtrain.graph.moe import GEMM_STREAMS

    te = stack_spec(load_stack_config("megatron_core_te"))
    assert te.grouped_gemm_streams == GEMM_STREAMS == 4 and te.expert_wgrad_main_grad
    assert "multi_stream_cublas_gemm" in te.provenance["grouped_gemm_streams"]
    titan = stack_spec(load_stack_config("torchtitan_fsdp2"))
    assert titan.grouped_gemm_streams == 0 and not titan.expert_wgrad_main_grad


@functools.lru_cache(maxsize=None)
def _validated(data: str, cluster: str, rows: Optional[Tuple[int, ...]] = None) -> Tuple[Tuple[float, float], ...]:
    from vtrain import compose
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import SHIPPED_STACK, resolve_dataset, shipped_defaults
    from vtrain.validation.run import validate_rows

    cfg = compose([f"+cluster={cluster}"], require=False)
    measured = [r for r in read_measurements(resolve_dataset(data)) if rows is None or r.index in rows]
    out = validate_rows(measured, cfg, shipped_defaults(data), stack=SHIPPED_STACK.get(data))
    assert all(r.predicted_ms is not None for r in out)
    return tuple((r.measured_ms, float(r.predicted_ms or 0.0)) for r in out)


def _mape(pairs: Tuple[Tuple[float, float], ...]) -> float:
    return 100.0 * sum(abs(p / m - 1.0) for m, p in pairs) / len(pairs)


@pytest.mark.slow
def test_blackwell_moe_table_in_sample():
    # 16.46% at the constants calibrated across sources (Megatron-Core's host time per kernel 51 us from 8 sources,
    # was 15 us assumed; Blackwell's sustained GEMM share from 6): 6.3% at the old ones. The three rows are one
    # source; the calibration's table (docs/calibration.md) gives its held-out figure. Guards today's figure.
    # 13.65% after the calibration of 2026-12-07 (Blackwell share 0.748, host time 55 us, the 1F1B A2A overlap share);
    # 14.60% with the dispatch's host sync holding the host back across passes (vtrain.sim.host_sync: the GB200
    # PP8 EP8 row, host-bound already, +30.9 -> +33.5%); 15.37% with Blackwell Ultra's power-limited GEMM clock
    # (the GB300 row +0.8 -> -3.2%; 14.43% without the host sync); 17.36% with the router's kernels as Megatron-Core
    # runs them (vtrain.graph.router: more eager launches at the shipped 55 us host time per kernel, which the
    # calibration refits to 50.0 us: 13.88% in sample, 14.84% held out); 17.87% with the flex dispatcher's routing
    # metadata (HybridEP's routing-map all-gather and preprocessing kernel; 14.46% in sample, 14.90% held out);
    # 12.88% at the calibration written after them (Blackwell share 0.767, host time 49.5 us; 15.11% held out)
    assert _mape(_validated("megatron_moe_qwen3_blackwell", "gb200_nvl72x16")) <= 13.4


@pytest.mark.slow
def test_qwen3_235b_h100_table():
    pairs = _validated("megatron_moe_qwen3_h100", "h100x1024")
    # 5.93% at the calibration of 2026-12-07, the main table at forced balance; 4.45% with the dispatch's host sync
    # (vtrain.sim.host_sync) and the FSDP row's bf16 gradients (bench/make_moe_csv.py); 4.94% at the calibration
    # written after the combined 1F1B's host cost (ep_overlap_hidden_share 0.50 -> 0.68 fitted on 6 sources)
    assert _mape(pairs) <= 5.45
    assert max(abs(p / m - 1.0) for m, p in pairs[5:]) < 0.07  # the long-context rows (+6.6% the worst)
    main = [p for _, p in pairs[:5]]
    assert min(main) in (main[1], main[2])  # the measured fastest plans (rows 2 and 3, 17.6 s each) predicted fastest
    assert max(main) == main[4]  # the measured slowest plan (row 5, 29.0 s) is predicted slowest
    # the measured order: 2 = 3 < 1 < 4 < 5 (rows 2 and 3 within 0.3% of each other)
    assert sorted(range(5), key=lambda i: main[i]) in ([1, 2, 0, 3, 4], [2, 1, 0, 3, 4])
    assert abs(main[1] / main[2] - 1.0) < 0.06  # measured 17.6 s both: predicted 5.3% apart (row 2, overlapped, first)
    # each main row's signed error (%), +-0.5 point; open: row 4 (PP32 VP3, EP8, NCCL all-to-all) -18.0 (docs/moe.md)
    errors = [100.0 * (p / m - 1.0) for m, p in pairs[:5]]
    # (row 2 read -0.2% on main 3403fa3 already, not -6.0; the router's kernels and the dispatchers' bookkeeping,
    # vtrain.graph.router, add +0.6-1.4, row 4 +1.1: -18.0 -> -16.9)
    # (at the written calibration, the overlap hiding 0.68 of the pair's all-to-all: row 2 +0.9 -> -4.7, row 4 -19.8,
    # row 5 -7.1)
    assert errors == pytest.approx([-4.9, -4.7, +0.6, -19.8, -7.1], abs=0.5)


def test_hybridep_sends_deepeps_bytes_and_permutes_what_it_received():
    """Megatron-Core's _HybridEPManager calls dispatch_with_permute / combine_with_unpermute; DeepEP's hybrid-ep
    executor runs them as the dispatch kernel then a permute kernel on the received buffer, and an unpermute
    kernel then the combine kernel (executor.cu dispatch_postprocess / combine_preprocess): DeepEP's wire bytes
    and DeepEP's received-token permutations, 24 SMs held (moe_hybridep_num_sms)."""
    from vtrain.comm.ep import DISPATCH_SMS

    hybrid, deepep = plan("hybridep"), plan("deepep")
    rows = 4096 * 4096 * 2.0 * 8
    received = rows * distinct_rank_fraction(128, 8, 8)
    assert permutations(QWEN3, hybrid) == permutations(QWEN3, deepep)
    fwd, _ = permutations(QWEN3, hybrid)
    assert _names_bytes(fwd.after_dispatch) == [("moe.received.permute", received + rows, 2)]
    assert _names_bytes(fwd.before_combine) == [("moe.received.unpermute", rows + received, 1)]
    for where in (GroupPlacement(8, 8), GroupPlacement(32, 8)):
        a, b = plan_ep_comms(QWEN3, hybrid, where), plan_ep_comms(QWEN3, deepep, where)
        assert [c.bytes for c in a.enter + a.exit] == [c.bytes for c in b.enter + b.exit]
    names = [op.name for op in moe_block(QWEN3, hybrid, *_comms(hybrid)).forward]
    assert not any(n.startswith("moe.permute") or "sort_chunks" in n for n in names)  # no all-to-all kernels
    assert names.index("moe.dispatch") < names.index("moe.received.permute") < names.index("moe.expert.fc1")
    assert names.index("moe.received.unpermute") < names.index("moe.combine")
    assert DISPATCH_SMS[MoeDispatcher.HYBRIDEP] == 24
