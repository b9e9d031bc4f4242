"""Block recompute (parallelism.recompute_num_layers: Megatron's --recompute-method block
--recompute-num-layers): the first r layers of each model chunk run again, the rest keep their activations;
time, memory and HFU checked against full and no recompute, by hand."""
import pytest

from vtrain import compose
from vtrain.api import simulate
from vtrain.config.build import build_workload
from vtrain.errors import ConfigError
from vtrain.sim.memory import layer_activation_bytes
from vtrain.sim.simulator import hardware_flops
from vtrain.sim.stage_costs import recomputed_layers
from vtrain.sim.stage_memory import recomputed_share
from vtrain.sim.structure import stage_partition
from vtrain.workload.enums import Recompute

# Llama 3 70B: 80 layers over pp 4, 20 per stage
BASE = ["+model=llama3_70b", "+cluster=h100x1024", "parallelism.tp=8", "parallelism.pp=4", "parallelism.dp=4",
        "training.seq_len=8192", "training.global_batch_size=64", "parallelism.recompute=full"]


def run(*extra):
    return simulate(compose([*BASE, *extra]))


def test_the_first_r_layers_of_a_chunk():
    assert recomputed_layers(0, 20) == 20  # 0: every layer (plain full recompute)
    assert recomputed_layers(5, 20) == 5
    assert recomputed_layers(99, 20) == 20


def test_all_layers_is_full_recompute_exactly():
    full = run()
    for r in ("20", "64"):
        part = run(f"parallelism.recompute_num_layers={r}")
        assert part.iteration_time_s == full.iteration_time_s
        assert part.peak_memory_bytes == full.peak_memory_bytes


def test_time_falls_and_memory_grows_as_fewer_layers_recompute():
    none, full = run("parallelism.recompute=none"), run()
    five, ten = run("parallelism.recompute_num_layers=5"), run("parallelism.recompute_num_layers=10")
    assert none.iteration_time_s < five.iteration_time_s < ten.iteration_time_s < full.iteration_time_s
    assert none.peak_memory_bytes > five.peak_memory_bytes > ten.peak_memory_bytes > full.peak_memory_bytes


def test_memory_is_the_recomputed_share_of_each_by_hand():
    """Stage activations: share x (full recompute's) + (1 - share) x (no recompute's + one layer's working
    set), share = 5 / 20."""
    none, full, five = run("parallelism.recompute=none"), run(), run("parallelism.recompute_num_layers=5")
    w = build_workload(compose(BASE))
    working = layer_activation_bytes(w.model, w.plan, Recompute.NONE)
    want = 0.25 * full.memory.activations_bytes + 0.75 * (none.memory.activations_bytes + working)
    assert five.memory.activations_bytes == pytest.approx(want)
    assert five.memory.weights_bytes == full.memory.weights_bytes


def test_hfu_counts_the_recomputed_share():
    w = build_workload(compose([*BASE, "parallelism.recompute_num_layers=5"]))
    assert recomputed_share(stage_partition(w.model, w.plan), w.plan) == pytest.approx(0.25)
    full = hardware_flops(build_workload(compose(BASE)))
    kept = hardware_flops(build_workload(compose([*BASE, "parallelism.recompute=none"])))
    assert hardware_flops(w) == pytest.approx(kept + 0.25 * (full - kept))


def test_interleaved_chunks_recompute_their_own_first_layers():
    """Two chunks of 10 layers per stage: r = 4 recomputes 8 of each stage's 20 layers."""
    w = build_workload(compose([*BASE, "parallelism.schedule=interleaved", "parallelism.virtual_stages=2",
                                "parallelism.recompute_num_layers=4"]))
    part = stage_partition(w.model, w.plan)
    assert recomputed_share(part, w.plan, 0) == pytest.approx(8 / 20)


def test_block_recompute_needs_full_recompute():
    with pytest.raises(ConfigError, match="recompute_num_layers=4 needs recompute=full"):
        run("parallelism.recompute=selective", "parallelism.recompute_num_layers=4")


def test_moe_layers_recompute_after_the_dense_ones():
    moe = ["+model=qwen3_30b_a3b", "+cluster=h100x1024", "parallelism.tp=1", "parallelism.pp=2",
           "parallelism.ep=8", "parallelism.dp=8", "training.seq_len=4096", "training.global_batch_size=64"]
    none = simulate(compose([*moe, "parallelism.recompute=none"]))
    full = simulate(compose([*moe, "parallelism.recompute=full"]))
    half = simulate(compose([*moe, "parallelism.recompute=full", "parallelism.recompute_num_layers=12"]))
    assert none.iteration_time_s < half.iteration_time_s < full.iteration_time_s


def test_validate_reads_the_count_and_the_method(tmp_path, capfd):
    """A block row recomputes 5 layers per stage; a uniform row (groups of 5, every layer again) runs full."""
    from tests.clirun import validate_table

    res, rows = validate_table("model,gpu,num_gpus,tp,pp,micro_batch,global_batch,seq_len,recompute,"
                               "recompute_num_layers,recompute_method,tokens_per_s_per_gpu\n"
                               "llama3_70b,H100,64,8,4,1,64,8192,full,5,block,800\n"
                               "llama3_70b,H100,64,8,4,1,64,8192,full,5,uniform,800\n"
                               "llama3_70b,H100,64,8,4,1,64,8192,full,,,800\n", tmp_path, capfd)
    assert res.code == 0, res.err
    block, uniform, full = (float(r["predicted_ms"]) for r in rows)
    assert uniform == full and block < full
