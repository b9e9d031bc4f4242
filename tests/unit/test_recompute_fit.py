"""The least recompute that fits (vtrain/sim/recompute_fit.py): the steps, the bisection over block recompute,
and task=simulate's hint for a plan that does not fit."""
from dataclasses import dataclass

import pytest

from tests.clirun import run_inprocess
from vtrain import compose
from vtrain.api import cost_model_for, least_recompute_that_fits
from vtrain.config.build import build_workload
from vtrain.sim.recompute_fit import (
    MODES,
    BlockRun,
    first_fitting,
    recompute_label,
    recompute_overrides,
    recompute_steps,
)
from vtrain.workload.enums import Recompute

DEEPSEEK = ["+model=deepseek_v3", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=16", "parallelism.dp=64",
            "parallelism.ep=64", "parallelism.sequence_parallel=false", "training.global_batch_size=8192",
            "training.seq_len=4096"]


@dataclass
class Fake:  # the part of a Report first_fitting reads
    fits: bool


def test_block_steps_are_bisected_for_the_fewest_layers_that_fit():
    steps = [{"recompute": Recompute.NONE}, BlockRun(1, 63), {"recompute": Recompute.FULL}]
    calls = []

    def attempt(s):
        calls.append(s)
        k = s.get("recompute_num_layers", 0 if s["recompute"] == Recompute.NONE else 64)
        return s, Fake(fits=k >= 37)

    got = first_fitting(steps, attempt)
    assert got is not None and got[0]["recompute_num_layers"] == 37 and len(calls) <= 9  # not 37 tries


def test_when_the_heaviest_step_does_not_fit_nothing_else_is_tried():
    """A fuzzed billion-layer model: one more simulation, not a bisection over 62 million layer counts."""
    calls = []

    def attempt(s):
        calls.append(s)
        return s, Fake(fits=False)

    got = first_fitting([{"recompute": Recompute.NONE}, BlockRun(1, 62_500_000), {"recompute": Recompute.FULL}],
                        attempt)
    assert got is not None and got[0] == {"recompute": Recompute.FULL} and len(calls) == 1


def test_a_step_the_plan_rules_out_is_passed_over_and_the_last_run_is_returned():
    steps = [{"recompute": Recompute.NONE}, {"recompute": Recompute.SELECTIVE}, {"recompute": Recompute.FULL}]
    got = first_fitting(steps, lambda s: None if s["recompute"] == Recompute.SELECTIVE else (s, Fake(False)))
    assert got is not None and got[0] == {"recompute": Recompute.FULL} and not got[1].fits
    assert first_fitting(steps, lambda s: None) is None


def test_steps_of_a_dense_model_have_no_moe_or_mla_modules():
    w = build_workload(compose(["+model=llama3_70b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=4",
                                "parallelism.dp=4"]))
    steps = recompute_steps(MODES, w.model, w.plan)
    assert [s.get("recompute_modules") for s in steps[:3]] == [None, None, "core_attn,layernorm"]
    assert steps[3:] == [BlockRun(1, 80 // 4 - 1), {"recompute": Recompute.FULL}]


def test_a_plan_that_does_not_fit_is_given_the_least_recompute_that_does():
    w = build_workload(compose(DEEPSEEK))
    got = least_recompute_that_fits(w, cost_model_for)
    assert got is not None
    w2, report = got
    assert report.fits and recompute_label(w2.plan) == "selective (core_attn,layernorm,moe_act,mla_up_proj)"
    assert recompute_overrides(w2.plan) == ("parallelism.recompute=selective "
                                            "parallelism.recompute_modules=core_attn,layernorm,moe_act,mla_up_proj")


def test_task_simulate_prints_the_hint(capfd, tmp_path):
    res = run_inprocess(["task=simulate", *DEEPSEEK, "tracking=off", f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 0, res.err
    assert "DOES NOT FIT" in res.out
    hint = next(x for x in res.out.splitlines() if x.startswith("hint: fits with recompute selective ("))
    assert "parallelism.recompute_modules=core_attn,layernorm,moe_act,mla_up_proj)" in hint, hint


@pytest.mark.parametrize("extra", [["parallelism.micro_batch_size=64", "training.global_batch_size=8192"]])
def test_task_simulate_says_when_no_recompute_fits(capfd, tmp_path, extra):
    res = run_inprocess(["task=simulate", *DEEPSEEK, *extra, "tracking=off", f"hydra.run.dir={tmp_path}"], capfd)
    assert res.code == 0, res.err
    assert "hint: no recompute setting fits this plan" in res.out, res.out[-800:]


def test_torchtitan_steps_through_its_own_modes():
    """torchtitan's selective checkpointing is per-op SAC and it has no block recompute by layer count."""
    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "stack=torchtitan_fsdp2",
                                "parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=8", "parallelism.zero_stage=3",
                                "parallelism.micro_batch_size=4", "training.seq_len=8192"]))
    steps = recompute_steps((Recompute.NONE, Recompute.SELECTIVE_OP, Recompute.FULL), w.model, w.plan, block=False)
    assert steps == [{"recompute": m} for m in (Recompute.NONE, Recompute.SELECTIVE_OP, Recompute.FULL)]
    got = least_recompute_that_fits(w, cost_model_for)
    assert got is not None and got[1].fits and got[0].plan.recompute in (Recompute.SELECTIVE_OP, Recompute.FULL)
    assert got[0].plan.recompute_num_layers == 0
