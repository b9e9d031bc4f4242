"""Goodput (vtrain/sim/goodput.py): the Young/Daly closed form, and the failure model against published figures."""
from __future__ import annotations

import math

import pytest

from vtrain.sim.goodput import Goodput, checkpoint_bytes, goodput_of, job_failures_per_h, young_daly_interval_s
from vtrain.workload import reliability as rel

DAY_S = 86400.0


def _run(train_s: float, gpus: int, params: float = 405e9, restart_s: float = rel.RESTART_S):
    return goodput_of(train_s, gpus, 8, checkpoint_bytes(params), rel.CHECKPOINT_WRITE_GB_PER_S_PER_NODE,
                      rel.GPU_FAILURES_PER_H, rel.NODE_FAILURES_PER_H, restart_s)


def test_young_daly_closed_form() -> None:
    assert young_daly_interval_s(60.0, 3600.0) == pytest.approx(math.sqrt(2 * 60 * 3600))
    # the interval minimises the first-order loss delta/tau + tau/(2M): its derivative vanishes there
    delta, mtbf = 30.0, 7200.0
    tau = young_daly_interval_s(delta, mtbf)
    loss = lambda t: delta / t + t / (2 * mtbf)  # noqa: E731
    assert loss(tau) < loss(tau * 0.8) and loss(tau) < loss(tau * 1.25)
    assert -delta / tau**2 + 1 / (2 * mtbf) == pytest.approx(0.0, abs=1e-12)


def test_expected_time_formula() -> None:
    g = goodput_of(1e6, 64, 8, 8e12, 1.0, 1e-5, 1e-4, 300.0)
    nodes, write = 8, 8e12 / (8 * 1e9)
    rate = 64 * 1e-5 + nodes * 1e-4
    assert g.failures_per_h == pytest.approx(rate)
    assert g.checkpoint_write_s == pytest.approx(write)
    m = 3600 / rate
    tau = math.sqrt(2 * write * m)
    wall = 1e6 * (1 + write / tau) / (1 - (300 + write + (tau + write) / 2) / m)
    assert g.expected_time_s == pytest.approx(wall)
    assert g.goodput == pytest.approx(1e6 / wall)
    assert g.expected_failures == pytest.approx(wall / m)


def test_no_failures_means_full_goodput() -> None:
    g = goodput_of(1e5, 1024, 8, 1e12, 1.0, 0.0, 0.0, 600.0)
    assert g.goodput == 1.0 and g.expected_time_s == 1e5 and g.expected_failures == 0.0
    write_s = 1e12 / (128 * 1.0e9)  # 1,024 GPUs = 128 nodes writing at 1 GB/s each
    assert g == Goodput(1.0, 0.0, 1e12, write_s, write_s, 1e5, 0.0, 1e5) and g.mtbf_s == math.inf


def test_llama3_interruption_rate() -> None:
    """The rates are derived from Llama 3's 419 interruptions: 16,384 GPUs fail every 3.1 hours, as published."""
    rate = job_failures_per_h(16_384, 2_048, rel.GPU_FAILURES_PER_H, rel.NODE_FAILURES_PER_H)
    assert rate * 54 * 24 == pytest.approx(419.0)
    assert 3600 / rate / 3600 == pytest.approx(3.09, abs=0.01)


def test_llama3_effective_training_time() -> None:
    """Validation against a figure the rates were NOT derived from: Llama 3 405B reached "higher than 90%
    effective training time" on 16,384 H100s (Dubey et al. 2024, Sec. 3.3.4). The model predicts 92.4% for a
    54-day window with a 405B checkpoint (14 bytes/parameter) and a 10-minute restart: within the published
    bound; and its failures over that window (~408) match the 419 counted."""
    train_s = 54 * DAY_S * rel.LLAMA3_EFFECTIVE_TRAINING_TIME
    g = _run(train_s, 16_384)
    assert g.goodput == pytest.approx(0.924, abs=0.002)
    assert g.goodput > rel.LLAMA3_EFFECTIVE_TRAINING_TIME
    assert g.expected_failures == pytest.approx(419, rel=0.05)
    assert g.checkpoint_write_s == pytest.approx(5.67e12 / 2e12)


def test_goodput_falls_with_scale() -> None:
    goodputs = [_run(30 * DAY_S, n).goodput for n in (1_024, 4_096, 16_384, 65_536)]
    assert goodputs == sorted(goodputs, reverse=True)
    assert goodputs[0] == pytest.approx(0.974, abs=0.002) and goodputs[-1] == pytest.approx(0.764, abs=0.002)


def test_loss_share_is_capped() -> None:
    g = goodput_of(1e6, 8, 8, 1e12, 1.0, 1.0, 1.0, 7200.0)  # a failure every ~6 minutes, 2-hour restarts
    assert 0 < g.goodput <= 1e-3 and math.isfinite(g.expected_time_s)


def test_opt_175b_restarts_are_under_predicted_by_half() -> None:
    """A second, weaker comparison: OPT-175B on 992 A100s (124 nodes) restarted 53-54 times in 56 days (Susan Zhang's
    talk on the OPT-175B logbook, as noted at zrss.github.io/archives/9b7ac1f7.html). Llama 3's rates predict ~26
    failures there: half, as OPT's restarts also count the manual ones after loss divergences, and its 2021 A100
    fleet is not Llama 3's 2024 H100 one. Recorded so that a change of the rates shows here."""
    rate = job_failures_per_h(992, 124, rel.GPU_FAILURES_PER_H, rel.NODE_FAILURES_PER_H)
    predicted = rate * 56 * 24
    assert predicted == pytest.approx(26.3, abs=0.2)
    assert 0.45 < predicted / 53.5 < 0.55


def test_a_run_checkpoints_each_parameter_with_its_master_weight_and_moments() -> None:
    """run_goodput: bf16 weights + fp32 master + two Adam moments, 2 + 4 + 2 x 4 = 14 B per parameter; with bf16
    moments (DeepSeek-V3's) 2 + 4 + 2 x 2 = 10 B; written by the job's nodes at the cluster's rate each."""
    from dataclasses import replace

    from vtrain import compose
    from vtrain.config.build import build_workload
    from vtrain.sim.goodput import run_goodput

    w = build_workload(compose(["+model=llama3_8b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=1",
                                "parallelism.dp=64", "training.global_batch_size=256", "training.seq_len=8192"]))
    params, c = float(w.model.total_params()), w.cluster
    nodes = 64 // c.gpus_per_node
    for moments, per_param in (("fp32", 14.0), ("bf16", 10.0)):
        g = run_goodput(replace(w, plan=replace(w.plan, optimizer_moments=moments)), 86400.0)
        assert g.checkpoint_bytes == params * per_param
        assert g.checkpoint_write_s == pytest.approx(params * per_param / (nodes * c.checkpoint_write_gb_per_s * 1e9))
        assert g.failures_per_h == pytest.approx(64 * c.gpu_failures_per_h + nodes * c.node_failures_per_h)
        assert g == goodput_of(86400.0, 64, c.gpus_per_node, params * per_param, c.checkpoint_write_gb_per_s,
                               c.gpu_failures_per_h, c.node_failures_per_h, c.restart_s)
