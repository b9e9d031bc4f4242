"""The energy model (vtrain/sim/energy.py): power from the engine's breakdown, node share, PUE, CO2, price."""
from dataclasses import replace

import pytest

from tests.clirun import run_inprocess
from vtrain import compose, simulate
from vtrain.report import StageBreakdown
from vtrain.sim.energy import J_PER_KWH, avg_power_w_per_gpu, energy, gpu_power_w, node_share_w, stage_activity
from vtrain.workload.system import DEFAULT_PUE, ClusterSpec, GpuSpec

BASE = ["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8"]
GPU = GpuSpec(name="g", peak_tflops={"bf16": 100.0}, hbm_capacity_gib=80.0, hbm_bandwidth_gb_per_s=2000.0,
              tdp_w=700.0, idle_w=70.0)
CLUSTER = ClusterSpec(name="c", gpu=GPU, gpus_per_node=8, num_nodes=4, node_overhead_w=2400.0, pue=1.25)


def stage(compute=0.0, host=0.0, comm=0.0, bubble=0.0, optimizer=0.0, s=0):
    return StageBreakdown(stage=s, compute_s=compute, host_overhead_s=host, exposed_comm_s=comm, bubble_s=bubble,
                          optimizer_s=optimizer, peak_memory_bytes=0.0, layers=1, params=1.0)


@pytest.fixture(scope="module")
def reference():
    return simulate(compose(BASE))


def test_power_endpoints_and_node_share():
    assert gpu_power_w(GPU, 0.0) == 70.0 and gpu_power_w(GPU, 1.0) == 700.0
    assert gpu_power_w(GPU, 0.5) == pytest.approx(385.0)
    assert node_share_w(CLUSTER) == 300.0
    assert avg_power_w_per_gpu([stage(compute=1.0)], CLUSTER) == pytest.approx(1000.0)  # TDP + node share
    assert avg_power_w_per_gpu([stage(bubble=1.0)], CLUSTER) == pytest.approx(370.0)  # idle + node share


def test_one_iteration_by_hand():
    st = [stage(compute=3.0, bubble=1.0)]  # activity 0.75 -> 70 + 630 * 0.75 = 542.5 W, + 300 W node share
    e = energy(st, 4.0, 10.0, 16, CLUSTER, usd_per_kwh=0.1, grid_kg_co2_per_kwh=0.4)
    assert e.avg_power_w_per_gpu == pytest.approx(842.5)
    assert e.energy_kwh_per_iteration == pytest.approx(16 * 842.5 * 4.0 * 1.25 / J_PER_KWH)
    assert e.energy_kwh == pytest.approx(10 * e.energy_kwh_per_iteration)
    assert e.co2_kg == pytest.approx(0.4 * e.energy_kwh) and e.energy_cost_usd == pytest.approx(0.1 * e.energy_kwh)


def test_linear_in_iterations_and_pue():
    st = [stage(compute=2.0, comm=0.5, optimizer=0.1, host=0.1, bubble=0.3)]
    one = energy(st, 3.0, 1.0, 32, CLUSTER, 0.1, 0.4)
    many = energy(st, 3.0, 1234.0, 32, CLUSTER, 0.1, 0.4)
    assert many.energy_kwh == pytest.approx(1234.0 * one.energy_kwh)
    hot = energy(st, 3.0, 1.0, 32, replace(CLUSTER, pue=2.5), 0.1, 0.4)
    assert hot.energy_kwh == pytest.approx(2.0 * one.energy_kwh)  # 2.5 / 1.25
    assert hot.avg_power_w_per_gpu == one.avg_power_w_per_gpu  # IT power: before the PUE


def test_waiting_draws_less_than_computing():
    busy = stage(compute=9.0, comm=1.0)
    waiting = stage(compute=4.0, comm=1.0, host=2.0, bubble=3.0)
    assert stage_activity(waiting) < stage_activity(busy) <= 1.0
    assert avg_power_w_per_gpu([waiting], CLUSTER) < avg_power_w_per_gpu([busy], CLUSTER)
    # the plan's power is the mean over stages (equal GPUs each), not the critical stage's
    assert avg_power_w_per_gpu([busy, waiting], CLUSTER) == pytest.approx(
        (avg_power_w_per_gpu([busy], CLUSTER) + avg_power_w_per_gpu([waiting], CLUSTER)) / 2)


def test_report_fields_and_bounds(reference):
    r = reference
    gpu, share = 400.0, 2200.0 / 8  # a100_80gb TDP; _dgx_a100 node overhead over 8 GPUs
    assert 60.0 + share <= r.avg_power_w_per_gpu <= gpu + share
    assert r.energy_kwh_per_iteration == pytest.approx(
        r.gpus_used * r.avg_power_w_per_gpu * r.iteration_time_s * DEFAULT_PUE / J_PER_KWH)
    assert r.energy_kwh == pytest.approx(r.iterations * r.energy_kwh_per_iteration)
    d = r.to_dict()
    for k in ("energy_kwh_per_iteration", "energy_kwh", "avg_power_w_per_gpu", "co2_kg", "energy_cost_usd"):
        assert d[k] == getattr(r, k) and d[k] > 0


def test_overrides_scale_energy_not_time(reference):
    r = simulate(compose([*BASE, "cluster.pue=1.5"]))
    assert r.iteration_time_s == reference.iteration_time_s
    assert r.energy_kwh == pytest.approx(reference.energy_kwh * 1.5 / DEFAULT_PUE)
    more = simulate(compose([*BASE, "training.tokens_to_train=600e9"]))
    assert more.energy_kwh == pytest.approx(2 * reference.energy_kwh)
    priced = simulate(compose([*BASE, "pricing.usd_per_kwh=0.25", "pricing.grid_kg_co2_per_kwh=0.05"]))
    assert priced.energy_cost_usd == pytest.approx(0.25 * priced.energy_kwh)
    assert priced.co2_kg == pytest.approx(0.05 * priced.energy_kwh)
    assert priced.cost_usd == reference.cost_usd  # the GPU-hour price is unchanged


def test_bubble_heavy_plan_draws_less_but_costs_more_energy(reference):
    small = simulate(compose([*BASE, "training.global_batch_size=128"]))  # 16 stages, 16 micro-batches
    assert max(st.bubble_s / st.total_s for st in small.stages) > 0.3
    assert small.avg_power_w_per_gpu < reference.avg_power_w_per_gpu
    assert small.energy_kwh > reference.energy_kwh  # same tokens, idler GPUs for longer


@pytest.mark.parametrize("override,message", [
    ("cluster.pue=0.5", "cluster.pue=0.5: must be a finite number in [1, 10]"),
    ("cluster.node_overhead_w=-5", "cluster.node_overhead_w=-5.0: must be a finite number in [0, 100000]"),
    ("pricing.usd_per_kwh=-1", "pricing.usd_per_kwh=-1.0: must be a finite number in [0, 100]"),
    ("pricing.grid_kg_co2_per_kwh=inf", "pricing.grid_kg_co2_per_kwh=inf: must be a finite number in [0, 10]"),
])
def test_bad_energy_input_is_one_line_exit_2(tmp_path, capfd, override, message):
    run_dir = tmp_path / "run"
    res = run_inprocess(["task=simulate", "+model=gpt175b", "+cluster=a100x1024", override,
                         f"hydra.run.dir={run_dir}"], capfd)
    assert message in res.one_line_error()
    assert not run_dir.exists()
