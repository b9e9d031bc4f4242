"""Block-scaled GEMMs (MXFP8, NVFP4) where no table measures them: per-tensor FP8's efficiency times
``gpu.block_scaled_gemm_ratio``, fitted on pairs of one job in two precisions from two sources (torchtitan
bf16 -> MXFP8, Megatron-Bridge FP8-CS -> MXFP8; vtrain.calibration.block_scaled), checked leave-one-source-out
and on the pairs it was not fitted on; torchao's per-GEMM MX casts (vtrain.graph.torchao_mx) priced apart."""
import math
from dataclasses import replace

import pytest

from vtrain import compose, simulate
from vtrain.calibration import block_scaled as bs
from vtrain.config.build import gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.cost.gemm import GemmCurve, borrowed_efficiency
from vtrain.graph.ops import Gemm, MemoryOp
from vtrain.graph.torchao_mx import (
    CAST_BYTES_PER_ELEMENT,
    NVFP4_CAST_BYTES_PER_ELEMENT,
    _cast,
    _nvfp4_cast,
    _rewritten,
    uses_torchao_mx,
)


@pytest.fixture(scope="module")
def pairs():
    return bs.load_pairs()


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_a_borrowed_block_scaled_efficiency_takes_the_ratio(precision):
    gpu = gpu_spec(load_gpu_config("gb200"))
    assert borrowed_efficiency(gpu, precision) == "fp8" and gpu.block_scaled_gemm_ratio < 1.0
    fp8 = gpu.gemm_efficiency_by_precision["fp8"]
    assert GemmCurve.for_gpu(gpu, precision).eta_max == pytest.approx(fp8 * gpu.block_scaled_gemm_ratio)
    assert GemmCurve.for_gpu(gpu, "fp8").eta_max == pytest.approx(fp8)  # per-tensor FP8 keeps its own
    assert GemmCurve.for_gpu(gpu, "fp8_blockwise").eta_max == pytest.approx(fp8)  # not a microscaling format


def test_a_measured_block_scaled_efficiency_is_not_scaled():
    gpu = gpu_spec(load_gpu_config("gb200"))
    effs = {**gpu.gemm_efficiency_by_precision, "mxfp8": 0.61}  # a value of its own: no longer fp8's copy
    own = replace(gpu, gemm_efficiency_by_precision=effs)
    assert borrowed_efficiency(own, "mxfp8") is None
    assert GemmCurve.for_gpu(own, "mxfp8").eta_max == pytest.approx(0.61)


def test_the_caution_note_names_the_ratio():
    cfg = compose(["+model=llama3_8b", "+cluster=gb200_nvl72x16", "training.precision=mxfp8",
                   "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "training.global_batch_size=8"])
    ratio = gpu_spec(load_gpu_config("gb200")).block_scaled_gemm_ratio
    assert (f"caution: mxfp8 GEMMs are priced at fp8's efficiency x {ratio:.3g} (gpu.block_scaled_gemm_ratio, "
            "fitted end to end): no table measures this GPU's mxfp8 kernels") in simulate(cfg).notes


def test_torchao_casts_each_operand_per_gemm():
    """mx_mm: 2 casts in forward (input, weight along dim 0), 4 in backward (grad_output twice, weight, input
    along dim 1), each 2 + 1 + 1/32 B per element, even where the generic graph shares the input's cast."""
    tokens, n, k = 4096, 1024, 512
    fwd = (MemoryOp("wk.quant", 4.0 * k * n, 1, weight_bytes=4.0 * k * n), Gemm("wk", m=tokens, n=n, k=k))
    bwd = (MemoryOp("wk.quant.bwd", 4.0 * tokens * n), Gemm("wk.dgrad", m=tokens, n=k, k=n))
    q, qb = _rewritten(fwd, _cast)[0], _rewritten(bwd, _cast)[0]
    assert CAST_BYTES_PER_ELEMENT == pytest.approx(3.03125)
    assert (q.bytes, q.kernels, q.weight_bytes) == pytest.approx((3.03125 * (tokens * k + k * n), 2, 3.03125 * k * n))
    assert (qb.bytes, qb.kernels) == pytest.approx((3.03125 * (2 * tokens * n + k * n + tokens * k), 4))
    assert uses_torchao_mx(True, "mxfp8") and not uses_torchao_mx(True, "fp8") and not uses_torchao_mx(False, "mxfp8")


def test_torchao_nvfp4_casts_each_linear_with_its_own_triton_kernels():
    """nvfp4_mm_triton: forward, an RHT amax pass and a row+column quantize of the input and of the weight (read 2 +
    2 B, write 2 x (0.5 + 1/16) B each), 4 kernels; backward, the same two for the output gradient only (the input's
    and weight's column codes are saved), 2 kernels; eager kernels of their own, never fused."""
    tokens, n, k = 4096, 1024, 512
    e = 2.0 + 2.0 + 2.0 * (0.5 + 1.0 / 16.0)
    fwd = (MemoryOp("wk.quant", 4.0 * k * n, 1, weight_bytes=4.0 * k * n), Gemm("wk", m=tokens, n=n, k=k))
    bwd = (MemoryOp("wk.quant.bwd", 4.0 * tokens * n), Gemm("wk.dgrad", m=tokens, n=k, k=n))
    q, qb = _rewritten(fwd, _nvfp4_cast)[0], _rewritten(bwd, _nvfp4_cast)[0]
    assert NVFP4_CAST_BYTES_PER_ELEMENT == pytest.approx(e)
    assert q.eager and (q.bytes, q.kernels, q.weight_bytes) == pytest.approx((e * (tokens * k + k * n), 4, e * k * n))
    assert qb.eager and (qb.bytes, qb.kernels) == pytest.approx((e * tokens * n, 2))


def _compiled_torchtitan_layer(precision: str):
    """One transformer layer's graph of Llama 3 8B on 4 GB200 under compiled torchtitan in ``precision``."""
    from vtrain.config.build import build_workload
    from vtrain.graph.options import graph_options
    from vtrain.sim.structure import comm_plan, model_graph, shape_key, stage_partition

    w = build_workload(compose(["+model=llama3_8b", "+cluster=gb200_nvl72x16", f"training.precision={precision}",
                                "stack=torchtitan_fsdp2_compile", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=4", "training.global_batch_size=4"]))
    shape = shape_key(w.model, w.plan)
    comm = comm_plan(w, stage_partition(w.model, w.plan, shape))
    return model_graph(w.model, w.plan, comm.tp, comm.cp, comm.ep, graph_options(w.stack), shape).layer


def test_torchtitan_nvfp4_casts_are_not_fused_and_not_shared():
    """A compiled torchtitan NVFP4 layer: each of wq, wk, wv casts the shared input itself, no cast fused with the
    norm before it (the generic graph: wk's and wv's casts are their weights' only, wq's fused into norm1)."""
    ops = {op.name: op for op in _compiled_torchtitan_layer("nvfp4").forward.ops}
    for name in ("wq.quant", "wk.quant", "wv.quant", "w1.quant", "w3.quant"):
        assert ops[name].eager and ops[name].kernels == 4, name
    inputs = [ops[f"{x}.quant"].bytes - ops[f"{x}.quant"].weight_bytes for x in ("wq", "wk", "wv")]
    assert inputs[0] > 0 and inputs == pytest.approx([inputs[0]] * 3)  # each casts the same input itself
    assert not any("+" in n and "quant" in n for n in ops)


def test_torchtitan_mxfp8_pays_torchaos_casts():
    """Compiled, torchao's casts (6 a GEMM, unfused) cost a few percent of the step over the generic casts fused
    into their neighbours; eager, they are single kernels where the generic cast pays the eager stack's traffic."""
    base = ["+model=llama3_8b", "+cluster=gb200_nvl72x16", "training.precision=mxfp8", "parallelism.tp=1",
            "parallelism.pp=1", "parallelism.dp=8", "training.global_batch_size=8"]

    def ratio(stack):
        on, off = (simulate(compose(base + [f"stack={stack}", f"stack.torchao_mx_casts={v}"])).iteration_time_s
                   for v in ("true", "false"))
        return on / off
    assert 1.02 < ratio("torchtitan_fsdp2_compile") < 1.2  # memory-bound casts beside compute-bound GEMMs
    assert 0.9 < ratio("torchtitan_fsdp2") < 1.0


def test_torchtitan_mxfp8_casts_are_not_fused_and_not_shared():
    """A compiled torchtitan MXFP8 layer: every GEMM's input cast is torchao's own kernel (Triton along dim 0, CUDA
    along dim 1), none fused with the norm, SwiGLU or residual beside it (the rewrite ran after fusion before, and
    a fused run such as norm1+wq.quant kept the generic price)."""
    layer = _compiled_torchtitan_layer("mxfp8")
    fwd, bwd = ({op.name: op for op in p.ops} for p in (layer.forward, layer.backward))
    for name in ("wq", "wk", "wv", "proj", "w1", "w3", "fc2"):
        assert fwd[f"{name}.quant"].eager and fwd[f"{name}.quant"].kernels == 2, name
        assert bwd[f"{name}.quant.bwd"].eager and bwd[f"{name}.quant.bwd"].kernels == 4, name
    assert not any("+" in n and "quant" in n for n in (*fwd, *bwd))


@pytest.mark.slow  # the pairs simulate 12 measured rows; the fast loop keeps the pricing tests above
def test_pairs_of_both_sources(pairs):
    dense = bs.fitted_pairs(pairs)
    assert sum(p.source == bs.TORCHTITAN for p in dense) == 4 and sum(p.source == bs.BRIDGE for p in dense) == 8
    assert all(p.low[1].cluster.gpu.name == p.ref[1].cluster.gpu.name for p in pairs)


@pytest.mark.slow  # a fit over the pairs; CI runs it
def test_shipped_ratio_is_the_two_source_fit(pairs):
    ratio = bs.fit(bs.fitted_pairs(pairs))
    for gpu in bs.WRITTEN:
        shipped = gpu_spec(load_gpu_config(gpu)).block_scaled_gemm_ratio
        assert shipped == pytest.approx(ratio, abs=0.0015), (
            f"gpu/{gpu}.yaml ships block_scaled_gemm_ratio={shipped}, the fit now gives {ratio:.4f}: refit with "
            "python -m vtrain task=calibrate calibrate.scope=all calibrate.write=true")


@pytest.mark.slow  # a fit over the pairs and its leave-one-source-out folds (~3.5 s of CPU); CI runs it
def test_in_sample_and_leave_one_source_out(pairs):
    """Each source's pairs alone ask for a ratio below 1 and read closer there than at fp8's efficiency (1.0);
    pooled, each source's pairs at the pooled ratio read closer too (Megatron-Bridge 2.6% against 3.6% at 1.0, since
    torchao's casts are priced unfused in torchtitan's pairs: before, 3.9% against 3.5%). Out of sample the sources
    still differ: torchtitan alone asks for a lower ratio than Megatron-Bridge alone (0.845 against 0.936);
    torchtitan predicted from the Bridge pairs alone reads closer than at 1.0 (the Bridge pairs from torchtitan's
    alone do not: printed)."""
    dense = bs.fitted_pairs(pairs)
    ratio = bs.fit(dense)
    by = {s: [p for p in dense if p.source == s] for s in (bs.TORCHTITAN, bs.BRIDGE)}
    held = bs.leave_one_source_out(dense)
    own = {bs.TORCHTITAN: held[bs.BRIDGE], bs.BRIDGE: held[bs.TORCHTITAN]}  # each fitted on its own pairs
    for s, ps in by.items():
        assert own[s] < 1.0 and bs.mean_abs_pct(ps, own[s]) < bs.mean_abs_pct(ps, 1.0), s
    assert bs.mean_abs_pct(dense, ratio) < bs.mean_abs_pct(dense, 1.0)
    for ps in by.values():
        assert bs.mean_abs_pct(ps, ratio) < bs.mean_abs_pct(ps, 1.0)
    print("\n" + "\n".join(bs.report(pairs, ratio, bs.shipped_ratio())))
    assert held[bs.BRIDGE] < ratio < held[bs.TORCHTITAN]  # held[s]: fitted without s
    assert bs.mean_abs_pct(by[bs.TORCHTITAN], held[bs.TORCHTITAN]) < bs.mean_abs_pct(by[bs.TORCHTITAN], 1.0)


@pytest.mark.slow  # a fit over the pairs; CI runs it
def test_held_out_pairs(pairs):
    """Not fitted on: the MoE pairs of both sources, torchtitan's NVFP4 pairs (the ratio transferred)."""
    ratio = bs.shipped_ratio()
    held = [p for p in pairs if p not in bs.fitted_pairs(pairs)]
    scout = [p for p in held if p.source == bs.TORCHTITAN and not p.dense]
    assert len(scout) == 1 and abs(bs.error(scout[0], ratio)) < abs(bs.error(scout[0], 1.0))
    moe = [p for p in held if p.source == bs.BRIDGE]
    assert len(moe) == 4 and bs.mean_abs_pct(moe, ratio) < 6.0
    for p in [q for q in held if q.low[1].plan.precision.value == "nvfp4"]:
        assert abs(bs.error(p, ratio)) < abs(bs.error(p, 1.0)) and math.expm1(bs.error(p, ratio)) < 0


def test_a_format_without_a_table_entry_borrows_the_default_efficiency():
    """borrowed_efficiency: a scaled-FP8 recipe missing from the GPU's table reads per-tensor fp8's entry, any other
    missing format (or an FP8 recipe where fp8 is missing too) the GPU's gemm_max_efficiency, and says so."""
    g = gpu_spec(load_gpu_config("b200"))
    effs = dict(g.gemm_efficiency_by_precision)
    effs.pop("nvfp4", None)
    assert borrowed_efficiency(replace(g, gemm_efficiency_by_precision=effs), "nvfp4") == "gemm_max_efficiency"
    no_fp8 = {k: v for k, v in effs.items() if not k.startswith("fp8")}
    assert borrowed_efficiency(replace(g, gemm_efficiency_by_precision=no_fp8), "fp8_rowwise") == "gemm_max_efficiency"
    assert borrowed_efficiency(replace(g, gemm_efficiency_by_precision=effs), "fp8_rowwise") == "fp8"
