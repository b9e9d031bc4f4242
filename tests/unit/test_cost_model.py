"""The analytical cost model's shape rules: graded GEMM alignment, the vocabulary shard, per-layer sync."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.config.build import build_workload
from vtrain.cost.analytical import AnalyticalCostModel, alignment_elements
from vtrain.graph.ops import Gemm
from vtrain.sim.stage_costs import SideStream, price_chunk


@pytest.mark.parametrize("dims,expected", [((4096, 1024, 1024), 8), ((1024, 12564, 1024), 4),
                                           ((1024, 6282, 1024), 2), ((1024, 50257, 1024), 1)])
def test_alignment_elements(dims, expected):
    assert alignment_elements(*dims) == expected


def _model():
    cfg = compose(["+model=gpt_1_7b", "+cluster=vtrain_a100", "parallelism.tp=1", "parallelism.pp=1",
                   "parallelism.sequence_parallel=false"])
    w = build_workload(cfg)
    return w, AnalyticalCostModel(w)


def test_misalignment_penalty_is_graded_by_load_width():
    w, cost = _model()
    m = w.cluster.gpu.gemm_misaligned_efficiency
    cost.wave = False  # isolate the alignment factor from wave quantization
    eff = {n: cost.gemm_efficiency(Gemm("g", m=4096, n=n, k=1024)) for n in (8192, 8196, 8194, 8193)}
    # a = 8, 4, 2, 1 elements: each halving of the load width costs the same factor, m at a = 1
    assert eff[8196] / eff[8192] == pytest.approx(m ** (1 / 3), rel=0.02)
    assert eff[8194] / eff[8192] == pytest.approx(m ** (2 / 3), rel=0.02)
    assert eff[8193] / eff[8192] == pytest.approx(m, rel=0.02)


def test_vocab_shard_padding():
    w, _ = _model()
    megatron = replace(w.model, vocab_size=50257, vocab_divisible_by=128)
    assert [megatron.vocab_shard(t) for t in (1, 2, 8)] == [50304, 25216, 6400]  # multiple of 128·t
    unpadded = replace(megatron, vocab_divisible_by=0)
    assert [unpadded.vocab_shard(t) for t in (1, 2, 4, 8)] == [50257, 25128, 12564, 6282]
    assert megatron.embedding_params() - unpadded.embedding_params() == (50304 - 50257) * megatron.hidden_size


def test_host_waits_for_gpu_at_layer_boundaries():
    # one host-bound op (host 1, GPU 0.1) then one GPU-bound op (host 0.1, GPU 1) per layer: without
    # the sync the host would issue the next layer during the GPU-bound op and the layers would overlap
    layer = [(0.1, 1.0, 0.0, 0.0, 0), (1.0, 0.1, 0.0, 0.0, 0)]
    cost = price_chunk([(layer, 4, SideStream())], 0.0)
    assert cost.latency_s == pytest.approx(4 * 2.1)
    assert cost.gpu_s == pytest.approx(4 * 1.1)
