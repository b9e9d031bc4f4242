"""Collective model: ring formulas, hierarchy across nodes, and the fit to nccl-tests tables."""
import pytest

from vtrain.comm.placement import GroupPlacement, placement
from vtrain.config.build import build_workload
from vtrain.config.compose import compose
from vtrain.cost.collectives import collective_time_s
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


# --- per-kind, LL, NVLS, hierarchy with overlap, all-to-all, NVLink domains --------------------------------
from dataclasses import replace  # noqa: E402

from vtrain.comm.placement import domain_placement  # noqa: E402
from vtrain.cost.collectives import tier_time_s  # noqa: E402
from vtrain.workload.system import ClusterSpec, GpuSpec, NetworkTier  # noqa: E402

GIB = 2**30


def _tier(**kw):
    base = dict(bandwidth_gb_per_s=100.0, latency_s=10e-6, step_latency_s=1e-6, efficiency=0.5)
    base.update(kw)
    return NetworkTier(**base)


def test_tier_time_hand_computed_per_kind_and_group_exponent():
    t = _tier(kind_latency_s={"all_gather": 20e-6}, kind_efficiency={"all_gather": 0.8},
              kind_group_exponent={"all_gather": 0.0})
    S = 1e9
    # all-reduce: the scalars, ring: 10 us + 2*7*1 us + 2*7/8 * 1e9 / (100e9 * 0.5)
    assert tier_time_s(t, CollectiveKind.ALL_REDUCE, 8, S) == pytest.approx(10e-6 + 14e-6 + 1.75 * S / 50e9)
    # all-gather: its own latency and efficiency; exponent 0: the whole buffer whatever n
    assert tier_time_s(t, CollectiveKind.ALL_GATHER, 8, S) == pytest.approx(20e-6 + 7e-6 + S / 80e9)
    assert tier_time_s(t, CollectiveKind.ALL_GATHER, 1, S) == 0.0


def test_fastest_protocol_and_nvls_are_taken():
    t = _tier(ll_latency_s={"all_reduce": 2e-6}, ll_efficiency={"all_reduce": 0.1}, nvls_latency_s=50e-6,
              nvls_efficiency=0.4)
    small, big = 1e3, 1e9
    ll = 2e-6 + 14e-6 + 1.75 * small / 10e9
    assert tier_time_s(t, CollectiveKind.ALL_REDUCE, 8, small) == pytest.approx(ll)
    nvls = 50e-6 + big / 40e9  # NVLS: the buffer once at 40% of the link, vs the ring's 1.75x at 50%
    assert tier_time_s(t, CollectiveKind.ALL_REDUCE, 8, big) == pytest.approx(nvls)
    assert tier_time_s(t, CollectiveKind.ALL_GATHER, 8, big) == pytest.approx(10e-6 + 7e-6 + 0.875 * big / 50e9)


def _two_tier_cluster(overlap=0.0, gpus_per_node=8, domain=0):
    gpu = GpuSpec(name="g", hbm_capacity_gib=80.0, hbm_bandwidth_gb_per_s=3000.0)
    return ClusterSpec(name="c", gpu=gpu, gpus_per_node=gpus_per_node, num_nodes=16, nvlink_domain=domain,
                       intra_node=_tier(), inter_node=_tier(bandwidth_gb_per_s=400.0, latency_s=30e-6),
                       hierarchical_overlap=overlap)


def test_hierarchical_phases_in_sequence_or_pipelined():
    S, where = 1e9, GroupPlacement(16, 8)
    inter = tier_time_s(_tier(bandwidth_gb_per_s=400.0, latency_s=30e-6), CollectiveKind.ALL_REDUCE, 2, S / 8,
                        share=8.0)
    intra = 2 * (7e-6 + 0.875 * S / 50e9)  # reduce-scatter + all-gather inside the node, no call latency
    seq = collective_time_s(CollectiveKind.ALL_REDUCE, S, where, _two_tier_cluster(0.0))
    piped = collective_time_s(CollectiveKind.ALL_REDUCE, S, where, _two_tier_cluster(1.0))
    assert seq == pytest.approx(inter + intra)
    assert piped == pytest.approx(max(inter, intra))


def test_all_to_all_across_domains_is_its_slower_part():
    S, c = 1e9, _two_tier_cluster()
    t = collective_time_s(CollectiveKind.ALL_TO_ALL, S, GroupPlacement(32, 8), c)
    intra = 10e-6 + 7e-6 + (7 / 8) * (S * 8 / 32) / 50e9  # 7/32 of the buffer over NVLink
    inter = 30e-6 + 3e-6 + (3 / 4) * S / (400e9 * 0.5 / 8)  # 24/32 of it over the node's NIC share
    assert t == pytest.approx(max(intra, inter))


def test_all_to_all_across_nodes_moves_at_most_nccls_per_gpu_ceiling():
    """NCCL's all-to-all across nodes at the tier's per-GPU ceiling whatever the NIC: 400 and 800 GB/s nodes
    (8 GPUs: 25 and 50 GB/s each at efficiency 0.5) under a 30 GB/s ceiling move 25 and 30 GB/s."""
    S, where = 1e9, GroupPlacement(64, 8)
    for node_gb_per_s, rate in ((400.0, 25e9), (800.0, 30e9)):
        c = _two_tier_cluster()
        c = replace(c, inter_node=replace(c.inter_node, bandwidth_gb_per_s=node_gb_per_s, all_to_all_gb_per_s=30.0))
        t = collective_time_s(CollectiveKind.ALL_TO_ALL, S, where, c)
        fixed = 30e-6 + 7e-6  # the call and 7 steps across the 8 nodes
        assert t == pytest.approx(fixed + (56 / 64) * S / rate)
    # the ceiling is the shipped IB clusters' (H100 / B200 / B300 8-GPU nodes), and it binds only across nodes
    from vtrain.comm.ep import a2a_efficiency
    from vtrain.config.build import cluster_spec, gpu_spec
    for name, share in (("h100x1024", 0.76), ("b200x1024", 0.76), ("b300x1024", 0.38)):
        cfg = compose(["+model=gpt_1_7b", f"+cluster={name}"])
        cl = cluster_spec(cfg.cluster, gpu_spec(cfg.gpu))
        assert cl.inter_node.all_to_all_gb_per_s == 38.0
        assert a2a_efficiency(cl) == pytest.approx(share)  # DeepEP's bytes are rescaled from this share
        inside = collective_time_s(CollectiveKind.ALL_TO_ALL, S, GroupPlacement(8, 8), cl)
        assert inside == pytest.approx(tier_time_s(cl.intra_node, CollectiveKind.ALL_TO_ALL, 8, S))


def test_nvl72_group_inside_the_domain_runs_at_nvlink_speed():
    c = _two_tier_cluster(gpus_per_node=4, domain=72)
    assert c.domain_size == 72
    where = domain_placement(16, 1, c)
    assert where == GroupPlacement(16, 16)  # four trays, one NVLink domain
    t = collective_time_s(CollectiveKind.ALL_GATHER, GIB, where, c)
    assert t == pytest.approx(tier_time_s(c.intra_node, CollectiveKind.ALL_GATHER, 16, GIB))
    c = replace(c, inter_node=replace(c.inter_node, bandwidth_gb_per_s=50.0))  # 4 x 100 Gb/s per tray
    by_node = collective_time_s(CollectiveKind.ALL_GATHER, GIB, placement(16, 1, c.gpus_per_node), c)
    assert by_node > 1.5 * t  # placed by tray it would cross the scale-out network


def test_fitted_tier_vectorized_equals_scalar():
    from vtrain.calibration.collective_tables import CollTable, KindParams, predict_s

    p = KindParams(20e-6, 1e-6, 0.7, 0.6, 5e-6, 0.2, 60e-6, 0.45)
    tier = _tier(bandwidth_gb_per_s=900.0, kind_latency_s={"all_reduce": p.latency_s},
                 kind_step_latency_s={"all_reduce": p.step_latency_s}, kind_efficiency={"all_reduce": p.efficiency},
                 kind_group_exponent={"all_reduce": p.group_exponent}, ll_latency_s={"all_reduce": p.ll_latency_s},
                 ll_efficiency={"all_reduce": p.ll_efficiency}, nvls_latency_s=p.nvls_latency_s,
                 nvls_efficiency=p.nvls_efficiency)
    import numpy as np

    n, s = np.array([2.0, 8.0, 72.0, 4.0]), np.array([1e3, 1e6, 1e9, 3e10])
    vec = predict_s(p, CollTable("x", "all_reduce", n, s, s), 900e9, "all_reduce")
    scalar = [tier_time_s(tier, CollectiveKind.ALL_REDUCE, int(ni), si) for ni, si in zip(n, s)]
    assert vec == pytest.approx(scalar, rel=1e-12)


def test_a100_default_tier_is_the_plain_ring(cluster):
    from vtrain.cost.collectives import ring_time_s

    intra = cluster.intra_node
    bw = intra.bandwidth_bytes_per_s * intra.efficiency
    for n in (2, 4, 8):
        assert collective_time_s(CollectiveKind.ALL_REDUCE, 3e8, GroupPlacement(n, n), cluster) == \
            ring_time_s(n, 3e8, bw, intra, 2.0)
    assert replace(intra).kind_efficiency == {}
