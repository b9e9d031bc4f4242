"""The fused-attention rate over lengths (gpu.flash_attention_k0_tokens, flash_attention_max_length_factor): the
factor's form below and above the anchor, the keys one kernel call sees under each context-parallel scheme, and
which curve each GPU family ships."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.cost.analytical import FLASH_ANCHOR_KEYS, flash_length_factor
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import FlashAttention
from vtrain.graph.options import graph_options
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.partition import partition


def test_the_factor_is_one_at_the_anchor_falls_below_and_rises_to_its_bound_above():
    k0 = 2100.0
    assert flash_length_factor(FLASH_ANCHOR_KEYS, k0) == pytest.approx(1.0, rel=1e-12)
    assert flash_length_factor(1e6, None) == 1.0
    # below the anchor the same form: 2K causal (1,024 keys per query) at H200's kernel k0, 950 keys: the SDPA
    # flash and cuDNN kernels measured 0.64 and 0.62 of their 8K rate there
    # (profiles/measured/h200/attention_lengths.csv)
    assert flash_length_factor(1024.0, 950.0) == pytest.approx((1024 / 1974) / (4096 / 5046))
    assert 0.62 < flash_length_factor(1024.0, 950.0) < 0.65
    falling = [flash_length_factor(k, k0) for k in (2048.0, 1024.0, 128.0)]
    assert falling == sorted(falling, reverse=True) and falling[0] < 1.0
    rising = [flash_length_factor(k, k0) for k in (8192.0, 16384.0, 65536.0, 1e7)]
    assert rising == sorted(rising) and rising[0] > 1.0
    assert rising[-1] == pytest.approx((FLASH_ANCHOR_KEYS + k0) / FLASH_ANCHOR_KEYS, rel=1e-3)
    # k / (k + k0) over the anchor's: 64K causal (32,768 keys per query) on B200's fit
    assert flash_length_factor(32768.0, k0) == pytest.approx((32768 / 34868) / (4096 / 6196))
    # a cap bounds the gain above the anchor, not the fall below it
    assert flash_length_factor(32768.0, k0, 1.0) == 1.0 and flash_length_factor(65536.0, k0, 1.1) == 1.1
    assert flash_length_factor(1024.0, k0, 1.0) == flash_length_factor(1024.0, k0) < 1.0


def _attention(*overrides):
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=8", "training.seq_len=65536", "training.global_batch_size=8",
                                *overrides]))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    graph = build_model_graph(w.model, w.plan, comm.tp, comm.cp, opts=graph_options(w.stack))
    (op,) = [o for o in graph.layer.forward.ops if isinstance(o, FlashAttention)]
    return op


@pytest.mark.parametrize("overrides, keys", [
    ((), 32768),  # a whole causal sequence: half its keys per query on average
    (("parallelism.cp=4", "parallelism.cp_comm=p2p", "parallelism.dp=2"), 8192),  # a ring step: one s/cp block
    (("parallelism.cp=4", "parallelism.cp_comm=allgather", "parallelism.dp=2"), 32768),  # one call, all keys
    (("parallelism.cp=4", "parallelism.cp_comm=a2a", "parallelism.dp=2"), 32768),  # whole sequence, 1/cp heads
    (("parallelism.cp=4", "parallelism.cp_comm=allgather", "parallelism.dp=2", "stack=torchtitan_fsdp2"), 8192),
])
def test_the_keys_one_kernel_call_sees(overrides, keys):
    """torchtitan's all-gather CP still runs one kernel per ring step (its rotater), Megatron's p2p too."""
    assert _attention(*overrides).mean_call_keys == keys


def _gb200(seq_len, k0):
    w = build_workload(compose(["+model=llama3_8b", "+cluster=gb200_nvl72x16", "stack=megatron_core_te",
                                "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                                "parallelism.recompute=full", f"training.seq_len={seq_len}",
                                "training.global_batch_size=8"]))
    w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, flash_attention_k0_tokens=k0)))
    return simulate_workload(w, cost_model_for(w))[0].iteration_time_s


def test_blackwell_ships_the_sweep_curve_and_hopper_the_kernel_tables_capped_at_the_anchor():
    small = ["+model=llama3_8b", "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
             "training.global_batch_size=8"]
    gb200 = build_workload(compose([*small, "+cluster=gb200_nvl72x16"])).cluster.gpu
    h100 = build_workload(compose([*small, "+cluster=h100x1024"])).cluster.gpu
    # k0 1,750 tokens: refitted on the sweep at the calibrated Blackwell share (0.748) (bench/fit_attention_length.py)
    assert gb200.flash_attention_k0_tokens == 1700 and "sequence-length sweep" in gb200.provenance[
        "flash_attention_k0_tokens"]
    assert gb200.flash_attention_max_length_factor is None
    assert h100.flash_attention_k0_tokens == 950 and h100.flash_attention_max_length_factor == 1.0
    assert "attention_lengths.csv" in h100.provenance["flash_attention_k0_tokens"]
    assert _gb200(65536, 2100.0) < 0.95 * _gb200(65536, None)  # attention-bound at 64K: faster
    assert _gb200(2048, 2100.0) > _gb200(2048, None)  # below the anchor: slower
    assert _gb200(8192, 2100.0) == _gb200(8192, None)  # at the anchor: the measured rate


def test_hopper_long_calls_keep_the_anchor_rate_and_short_ones_slow_down():
    def step_s(seq_len, **gpu):
        w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "stack=megatron_core_te",
                                    "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                                    "parallelism.recompute=full", f"training.seq_len={seq_len}",
                                    "training.global_batch_size=8"]))
        w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, **gpu)))
        return simulate_workload(w, cost_model_for(w))[0].iteration_time_s

    flat = {"flash_attention_k0_tokens": None}
    assert step_s(65536) == step_s(65536, **flat)  # capped at 1.0: the anchor's rate
    assert step_s(2048) > step_s(2048, **flat)


def _flash_s(gpu, stack, by_arch=None):
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", f"cluster.gpu={gpu}", f"stack={stack}",
                                "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                                "training.global_batch_size=8", "parallelism.micro_batch_size=1"]))
    if by_arch is not None:
        w = replace(w, stack=replace(w.stack, attention_kernel_efficiency_by_architecture=by_arch))
    op = FlashAttention("flash_attn", 32, 8192, 128, causal=True)
    return cost_model_for(w).compute_time_s(op), w


@pytest.mark.parametrize("stack", ["torchtitan_fsdp2", "megatron_core_te"])
def test_a_stacks_attention_factor_measured_on_hopper_applies_there_only(stack):
    hopper, w = _flash_s("h200", stack)
    measured = w.stack.attention_kernel_efficiency_by_architecture["hopper"]
    assert w.cluster.gpu.architecture == "hopper" and w.stack.attention_factor("hopper") == measured
    general, _ = _flash_s("h200", stack, by_arch={})
    assert hopper == pytest.approx(general * w.stack.attention_kernel_efficiency / measured)  # time ~ 1 / factor
    blackwell, wb = _flash_s("b200", stack)
    unlisted, _ = _flash_s("b200", stack, by_arch={})
    assert wb.cluster.gpu.architecture == "blackwell" and blackwell == unlisted  # the general factor there


def test_a_report_names_the_attention_factor_its_gpu_uses():
    from vtrain.api import simulate

    def prov(gpu):
        cfg = compose(["+model=llama3_8b", "+cluster=h100x1024", f"cluster.gpu={gpu}", "stack=torchtitan_fsdp2",
                       "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "training.global_batch_size=8",
                       "parallelism.micro_batch_size=1"])
        return simulate(cfg).provenance

    hopper, blackwell = prov("h200"), prov("b200")
    assert hopper["stack.attention_kernel_efficiency_by_architecture"].startswith("fitted (hopper)")
    assert "stack.attention_kernel_efficiency" not in hopper
    assert "stack.attention_kernel_efficiency_by_architecture" not in blackwell
    assert "stack.attention_kernel_efficiency" in blackwell
