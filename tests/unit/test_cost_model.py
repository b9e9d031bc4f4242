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


# --- the GEMM curve per GPU and precision (vtrain/cost/gemm.py) -------------------------------------------
def _gpu(**kw):
    from vtrain.workload.system import GpuSpec

    base = dict(name="t", peak_tflops={"bf16": 1000.0, "fp8": 2000.0, "fp32": 60.0}, hbm_capacity_gib=80.0,
                hbm_bandwidth_gb_per_s=3000.0, num_sms=100, gemm_max_efficiency=0.8, gemm_half_efficiency_dim=10.0)
    base.update(kw)
    return GpuSpec(**base)


def test_gemm_curve_legacy_form_is_the_a100_formula():
    from vtrain.cost.gemm import GemmCurve, wave_efficiency

    w, cost = _model()
    gpu = w.cluster.gpu
    c = GemmCurve.for_gpu(gpu, w.plan.precision.value)
    m, n, k = 4096, 2048, 1024
    g = [d / (d + gpu.gemm_half_efficiency_dim) for d in (m, n, k)]
    expected = gpu.gemm_max_efficiency * g[0] * g[1] * g[2] * wave_efficiency(m, n, 1, gpu.num_sms)
    assert c.efficiency(m, n, k) == expected
    assert c.fixed_time_s == 0.0 and c.half_k == c.half_mn == gpu.gemm_half_efficiency_dim


def test_gemm_curve_hand_computed_with_k_term_fixed_time_and_wave_exponent():
    from vtrain.cost.gemm import GemmCurve

    gpu = _gpu(gemm_half_efficiency_k=128.0, gemm_fixed_time_s=5e-6, gemm_wave_exponent=0.5,
               gemm_efficiency_by_precision={"bf16": 0.9, "fp8": 0.7})
    bf16, fp8 = GemmCurve.for_gpu(gpu, "bf16"), GemmCurve.for_gpu(gpu, "fp8")
    assert fp8.half_k == 256.0  # the k-loop runs twice as fast: twice the k to amortize the same fixed time
    assert (bf16.eta_max, fp8.eta_max) == (0.9, 0.7)
    assert GemmCurve.for_gpu(gpu, "fp32").eta_max == 0.8  # not listed: gemm_max_efficiency
    # m = n = 1280: 10 x 10 = 100 tiles of 128 on 100 SMs: one full wave; k = 128 (aligned)
    eta = 0.9 * (1280 / 1290) ** 2 * (128 / 256)
    assert bf16.efficiency(1280, 1280, 128) == pytest.approx(eta, rel=1e-12)
    # n = 1281: 10 x 11 = 110 tiles: two waves, 110/200 of them used, to the power 0.5
    bf16_aligned = replace(bf16, align_eff={a: 1.0 for a in bf16.align_eff})  # n = 1281 is not 16-byte aligned
    assert bf16_aligned.efficiency(1280, 1281, 128) == pytest.approx(
        0.9 * (1280 / 1290) * (1281 / 1291) * 0.5 * (110 / 200) ** 0.5, rel=1e-12)
    t = bf16.compute_time_s(1280, 1280, 128)
    assert t == pytest.approx(5e-6 + 2 * 1280 * 1280 * 128 / (1000e12 * eta), rel=1e-12)
    assert fp8.align == 16 and bf16.align == 8  # 16-byte loads: 16 fp8 or 8 bf16 elements


def test_low_precision_plans_keep_attention_in_bf16():
    from vtrain.cost.gemm import high_precision_of

    gpu = _gpu()
    assert [high_precision_of(gpu, p) for p in ("fp8", "nvfp4", "bf16", "fp32")] == ["bf16", "bf16", "bf16", "fp32"]


def test_gemm_curve_rejects_a_precision_without_peak():
    from vtrain.cost.gemm import GemmCurve

    with pytest.raises(KeyError, match="no nvfp4 peak"):
        GemmCurve.for_gpu(_gpu(), "nvfp4")


def test_flash_attention_efficiency_overrides_the_gemm_product():
    w, cost = _model()
    from vtrain.graph.ops import FlashAttention

    op = FlashAttention("fa", batch_heads=32, seq_len=8192, head_dim=128)
    legacy = cost.compute_time_s(op)
    gpu = replace(w.cluster.gpu, flash_attention_efficiency=0.5)
    w2 = replace(w, cluster=replace(w.cluster, gpu=gpu))
    t = AnalyticalCostModel(w2).compute_time_s(op)
    assert t == pytest.approx(op.flops / (gpu.peak_flops_per_s(w.plan.precision.value) * 0.5))
    assert legacy == pytest.approx(op.flops / (gpu.peak_flops_per_s(w.plan.precision.value)
                                               * gpu.gemm_max_efficiency * gpu.attention_efficiency
                                               * w.stack.sustained_gemm_fraction(gpu)))


def test_a_stack_runs_at_the_gemm_curve_only_where_the_curve_was_fitted_to_its_runs():
    """stack.gemm_curve_fitted_on: on that architecture the stack's GEMMs run at the GPU's curve; any other stack,
    or the same stack on another architecture, at gpu.sustained_gemm_fraction of it. Memory-bound ops are
    unchanged (the share is a tensor-core clock, not HBM)."""
    w, cost = _model()
    gpu = w.cluster.gpu
    assert gpu.architecture == "ampere" and gpu.sustained_gemm_fraction < 1.0
    at_curve = replace(w.stack, gemm_curve_fitted_on="ampere")
    other = replace(w.stack, gemm_curve_fitted_on="")
    assert at_curve.sustained_gemm_fraction(gpu) == 1.0
    assert other.sustained_gemm_fraction(gpu) == gpu.sustained_gemm_fraction
    assert replace(w.stack, gemm_curve_fitted_on="hopper").sustained_gemm_fraction(gpu) == gpu.sustained_gemm_fraction
    big = Gemm("g", m=8192, n=8192, k=8192)
    t_curve = AnalyticalCostModel(replace(w, stack=at_curve)).compute_time_s(big)
    t_other = AnalyticalCostModel(replace(w, stack=other)).compute_time_s(big)
    assert t_curve / t_other == pytest.approx(gpu.sustained_gemm_fraction, rel=1e-6)


def test_only_the_stack_the_a100_curve_was_fitted_to_runs_at_it():
    """The stacks that inherit megatron_deepspeed_2022's configuration (Megatron-Core, DeepSpeed, torchtitan,
    llm-foundry, Megatron-LM 2021) do not inherit its gemm_curve_fitted_on: on an A100 their GEMMs, and the fused
    attention priced from the GEMM curve, run at the GPU's sustained share."""
    from vtrain.config.build import gpu_spec, stack_spec
    from vtrain.config.compose import group_options, load_gpu_config, load_stack_config

    gpu = gpu_spec(load_gpu_config("a100_80gb"))
    at_curve = {name for name in group_options("stack")
                if stack_spec(load_stack_config(name)).sustained_gemm_fraction(gpu) == 1.0}
    assert at_curve == {"megatron_deepspeed_2022"}
    w, _ = _model()
    te = replace(w, stack=stack_spec(load_stack_config("megatron_core_te")))
    vtrain_stack = replace(w, stack=stack_spec(load_stack_config("megatron_deepspeed_2022")))
    ratio = AnalyticalCostModel(te).flash_rate / AnalyticalCostModel(vtrain_stack).flash_rate
    assert ratio == pytest.approx(gpu.sustained_gemm_fraction, rel=1e-6)
