"""Collective model: ring formulas, hierarchy across nodes, and the fit to nccl-tests tables."""
import pytest

from vtrain.config.build import build_workload
from vtrain.config.compose import compose
from vtrain.cost.collectives import GroupPlacement, collective_time_s, placement
from vtrain.cost.nccl_tables import fit_ring_constants, read_allreduce_tables
from vtrain.graph.ops import CollectiveKind


@pytest.fixture(scope="module")
def cluster():
    return build_workload(compose(["+model=gpt175b", "+cluster=a100x1024"])).cluster


def test_placement_megatron_order():
    assert placement(8, 1, 8) == GroupPlacement(8, 8)  # tp=8 in a node
    assert placement(8, 8, 8).per_node == 1  # dp with tp=8: one GPU per node
    assert placement(16, 2, 8).per_node == 4


def test_reduce_scatter_is_half_all_reduce_bandwidth(cluster):
    where = GroupPlacement(8, 8)
    big = 1 << 30
    ar = collective_time_s(CollectiveKind.ALL_REDUCE, big, where, cluster)
    rs = collective_time_s(CollectiveKind.REDUCE_SCATTER, big, where, cluster)
    assert rs == pytest.approx(ar / 2, rel=0.02)


def test_cross_node_group_limited_by_nic_share(cluster):
    size = 1 << 30
    intra = collective_time_s(CollectiveKind.ALL_REDUCE, size, GroupPlacement(8, 8), cluster)
    inter = collective_time_s(CollectiveKind.ALL_REDUCE, size, GroupPlacement(8, 1), cluster)
    # 8 nodes, one GPU each, sharing 200 GB/s per node among 8 GPUs -> ~25 GB/s per ring
    assert inter > 8 * intra
    per_gpu = cluster.inter_node_bytes_per_s_per_gpu
    assert inter == pytest.approx(2 * 7 / 8 * size / per_gpu, rel=0.05)


def test_nccl_fit_reproduces_measured_a100_tables():
    fit = fit_ring_constants(read_allreduce_tables("a100"), 300e9)
    print(f"A100 nccl fit: latency {fit.latency_s * 1e6:.1f} us, efficiency {fit.efficiency:.3f}, "
          f"median error {fit.median_abs_err_pct:.1f}%")
    assert fit.median_abs_err_pct < 6.0
    assert 0.6 < fit.efficiency < 0.85
