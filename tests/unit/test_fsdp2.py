"""FSDP2 specifics of the torchtitan stack: the all-gather copy-out on the compute stream and the optimizer
step's traffic (hand-computed)."""
from dataclasses import replace

import pytest

from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.build import build_workload
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.partition import partition


def workload(*overrides):
    return build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "stack=torchtitan_fsdp2",
                                   "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8",
                                   "parallelism.zero_stage=3", "parallelism.distributed_optimizer=false",
                                   "parallelism.sequence_parallel=false", "parallelism.recompute=full",
                                   "training.global_batch_size=8", *overrides]))


def test_each_gathered_layer_is_copied_out_on_the_compute_stream():
    """A layer gathered in forward and again in backward (reshard_after_forward) is copied out twice: each
    copy reads the gathered buffer and writes the parameters, 2 x the layer's bf16 bytes at HBM speed."""
    w = workload("parallelism.reshard_after_forward=true")
    # no SM contention from the gathers beside the kernels: the copy alone (it shortens the slowed window)
    w = replace(w, cluster=replace(w.cluster, gpu=replace(w.cluster.gpu, overlap_slowdown=0.0)))
    cost = cost_model_for(w)
    with_copy, _ = simulate_workload(w, cost)
    without = replace(w, stack=replace(w.stack, fsdp_copy_out=False))
    no_copy, _ = simulate_workload(without, cost_model_for(without))
    part = partition(w.model, w.plan)
    copy_s = cost.copy_time_s(2 * part.layer_params * w.plan.dtype_bytes)
    expected = 2 * w.model.num_layers * w.plan.num_microbatches * copy_s
    assert with_copy.stages[0].compute_s - no_copy.stages[0].compute_s == pytest.approx(expected, rel=1e-9)
    assert with_copy.iteration_time_s > no_copy.iteration_time_s


def test_the_optimizer_step_moves_forty_bytes_per_sharded_parameter():
    w = workload()
    report, _ = simulate_workload(w, cost_model_for(w))
    gpu = w.cluster.gpu
    params = partition(w.model, w.plan).stage_params(0) / 8
    # at the fused Adam's measured bandwidth (stack.optimizer_bandwidth_fraction; test_optimizer_bandwidth.py)
    expected = params * 40.0 / (gpu.hbm_bandwidth_bytes_per_s * w.stack.optimizer_bandwidth_fraction)
    assert w.stack.optimizer_bytes_per_param == 40.0
    assert report.stages[0].optimizer_s == pytest.approx(expected, rel=1e-9)


def test_the_eager_fp32_loss_holds_twelve_bytes_per_logit_the_compiled_one_four():
    """torchtitan's eager loss upcasts the logits and starts the backward with fp32 log-probabilities and two
    fp32 gradients (12 B per logit); compiled it keeps bf16 logits and writes a bf16 gradient (4 B); the
    default (Megatron's fused cross-entropy) holds the logits and their fp32 softmax (2 + 4 B)."""
    w = workload()
    per_logit = {}
    for name, stack in (("eager", w.stack), ("compiled", replace(w.stack, loss_bytes_per_logit=4.0)),
                        ("default", replace(w.stack, loss_bytes_per_logit=None))):
        report, _ = simulate_workload(replace(w, stack=stack), cost_model_for(w))
        per_logit[name] = report.memory.other_bytes
    logits = w.plan.tokens_per_rank * w.model.vocab_shard(w.plan.tp)
    assert w.stack.loss_bytes_per_logit == 12.0
    assert per_logit["eager"] - per_logit["compiled"] == pytest.approx(8.0 * logits, rel=1e-12)
    assert per_logit["eager"] - per_logit["default"] == pytest.approx(6.0 * logits, rel=1e-12)


def test_with_tp_the_eager_loss_runs_vocab_parallel_at_sixteen_bytes_per_logit():
    """DTensor's loss_parallel (torchtitan's default with TP): its backward, (zeros + exp(x)) * grad, holds the
    saved fp32 log-probabilities, the zeros, exp(x) and their sum at once: 16 B per logit of the vocab shard.
    Without TP, a fused loss, or a stack that does not run it, the stack's own figure stands."""
    from vtrain.sim.memory import LOSS_PARALLEL_BYTES_PER_LOGIT, loss_bytes_per_logit

    tp2 = workload("parallelism.tp=2", "parallelism.dp=4", "parallelism.sequence_parallel=true")
    assert tp2.stack.loss_parallel and LOSS_PARALLEL_BYTES_PER_LOGIT == 16.0
    assert loss_bytes_per_logit(tp2.plan, tp2.stack) == 16.0
    assert loss_bytes_per_logit(workload().plan, tp2.stack) == 12.0  # tp = 1: aten's log_softmax and NLL
    assert loss_bytes_per_logit(tp2.plan, replace(tp2.stack, fused_loss=True, loss_bytes_per_logit=4.0)) == 4.0
    assert loss_bytes_per_logit(tp2.plan, replace(tp2.stack, loss_parallel=False)) == 12.0
    reports = {on: simulate_workload(w, cost_model_for(w))[0]
               for on, w in ((True, tp2), (False, replace(tp2, stack=replace(tp2.stack, loss_parallel=False))))}
    logits = tp2.plan.tokens_per_rank * tp2.model.vocab_shard(2)
    assert reports[True].memory.other_bytes - reports[False].memory.other_bytes == pytest.approx(4.0 * logits)


def test_the_compiled_loss_stays_fused_under_tp():
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "stack=torchtitan_fsdp2_compile",
                                "parallelism.tp=2", "parallelism.pp=1", "parallelism.dp=4"]))
    from vtrain.sim.memory import loss_bytes_per_logit

    assert w.stack.loss_parallel and w.stack.fused_loss and loss_bytes_per_logit(w.plan, w.stack) == 4.0
    blocks = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024",
                                     "stack=torchtitan_fsdp2_compile_blocks", "parallelism.tp=2", "parallelism.pp=1",
                                     "parallelism.dp=4"]))
    assert loss_bytes_per_logit(blocks.plan, blocks.stack) == 16.0  # its loss is eager


def test_only_stacks_that_run_dtensor_loss_parallel_say_so():
    """torchtitan's stacks inherit loss_parallel; llm-foundry (no TP; flash-attn's loss) states it does not."""
    from vtrain.config.compose import load_stack_config

    said = {name: load_stack_config(name).loss_parallel for name in
            ("torchtitan_fsdp2", "torchtitan_fsdp2_compile", "torchtitan_fsdp2_compile_blocks", "llm_foundry_fsdp",
             "megatron_core_te", "deepspeed")}
    assert said == {"torchtitan_fsdp2": True, "torchtitan_fsdp2_compile": True,
                    "torchtitan_fsdp2_compile_blocks": True, "llm_foundry_fsdp": False,
                    "megatron_core_te": False, "deepspeed": False}
