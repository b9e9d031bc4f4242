"""The shipped Hopper/Blackwell constants reproduce the measured tables they were fitted to (issue 12's targets:
GEMM median error <= 8%, collectives <= 10%), through the same code the simulator prices with."""
import numpy as np
import pytest

from vtrain import compose
from vtrain.calibration.collective_tables import read_xla_table
from vtrain.calibration.gemm_tables import Hardware, predict_s, read_gemm_table
from vtrain.config.build import cluster_spec, gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.cost.collectives import GroupPlacement, collective_time_s
from vtrain.cost.gemm import GemmCurve
from vtrain.graph.ops import CollectiveKind


def _errors(pred, meas):
    e = np.abs(np.asarray(pred) / np.asarray(meas) - 1) * 100
    return float(np.median(e)), float(np.percentile(e, 90))


@pytest.mark.parametrize("gpu,table_gpu,precision,target", [("h100_sxm", "H100", "bf16", 8.0),
                                                            ("b200", "B200", "bf16", 8.0),
                                                            ("b200", "B200", "fp8", 8.0)])
def test_shipped_gemm_curve_reproduces_the_xla_table(gpu, table_gpu, precision, target):
    g = gpu_spec(load_gpu_config(gpu))
    curve = GemmCurve.for_gpu(g, precision)
    t = read_gemm_table(table_gpu, precision, g.peak_tflops[precision])
    pred = [curve.compute_time_s(int(m), int(n), int(k), int(b)) for b, m, n, k in zip(t.b, t.m, t.n, t.k)]
    med, p90 = _errors(pred, t.time_s)
    print(f"{gpu} {precision} GEMM table: median {med:.1f}%, p90 {p90:.1f}% over {len(pred)} shapes")
    assert med <= target
    assert p90 <= 15.0


def test_gemm_vectorized_fit_formula_is_the_simulators():
    g = gpu_spec(load_gpu_config("b200"))
    t = read_gemm_table("B200", "fp8", g.peak_tflops["fp8"])
    curve = GemmCurve.for_gpu(g, "fp8")
    from vtrain.calibration.gemm_tables import GemmParams

    p = GemmParams(curve.eta_max, g.gemm_half_efficiency_dim, g.gemm_half_efficiency_k, g.gemm_fixed_time_s,
                   g.gemm_wave_exponent)
    vec = predict_s(p, t, Hardware(g.peak_tflops["fp8"], g.peak_tflops["bf16"], g.num_sms))
    scalar = [curve.compute_time_s(int(m), int(n), int(k), int(b)) for b, m, n, k in zip(t.b, t.m, t.n, t.k)]
    assert vec == pytest.approx(scalar, rel=1e-12)


def test_h100_fp8_rows_above_the_datasheet_peak_are_rejected():
    t = read_gemm_table("H100", "fp8", 1979.0)
    assert t.rejected == 29 and len(t.time_s) == 346


KINDS = {"all_reduce": CollectiveKind.ALL_REDUCE, "all_gather": CollectiveKind.ALL_GATHER,
         "reduce_scatter": CollectiveKind.REDUCE_SCATTER, "all_to_all": CollectiveKind.ALL_TO_ALL}


@pytest.mark.parametrize("cluster,table_gpu", [("h100x1024", "H100"), ("b200x1024", "B200"),
                                               ("gb200_nvl72x16", "GB200"), ("gb300_nvl72x16", "GB300")])
def test_shipped_fabric_reproduces_the_xla_collective_table(cluster, table_gpu):
    cfg = compose(["+model=gpt_1_7b", f"+cluster={cluster}"])
    c = cluster_spec(cfg.cluster, gpu_spec(cfg.gpu))
    pooled_pred, pooled_meas = [], []
    for name, kind in KINDS.items():
        t = read_xla_table(table_gpu, name)
        pred = [collective_time_s(kind, s, GroupPlacement(int(n), int(n)), c) for n, s in zip(t.n, t.size)]
        med, p90 = _errors(pred, t.time_s)
        print(f"{cluster} {name}: median {med:.1f}%, p90 {p90:.1f}% (n={len(pred)})")
        pooled_pred += pred
        pooled_meas += list(t.time_s)
        assert med <= 15.0
    med, p90 = _errors(pooled_pred, pooled_meas)
    print(f"{cluster} all four collectives: median {med:.1f}%, p90 {p90:.1f}%")
    assert med <= 10.0


def test_shipped_p2p_reproduces_collective_permute():
    cfg = compose(["+model=gpt_1_7b", "+cluster=h100x1024"])
    c = cluster_spec(cfg.cluster, gpu_spec(cfg.gpu))
    t = read_xla_table("H100", "p2p")
    pred = [collective_time_s(CollectiveKind.P2P, s, GroupPlacement(2, 2), c) for s in t.size]
    med, p90 = _errors(pred, t.time_s)
    print(f"h100x1024 p2p (collective-permute): median {med:.1f}%, p90 {p90:.1f}%")
    assert med <= 15.0


def test_yaml_update_keeps_comments_and_is_idempotent(tmp_path):
    from vtrain.calibration.yaml_write import update_yaml

    path = tmp_path / "g.yaml"
    path.write_text("# a comment\nname: g\ngemm_max_efficiency: 0.7\nprovenance:\n  peaks: \"datasheet\"\n")
    values = {"gemm_max_efficiency": 0.9077, "gemm_efficiency_by_precision": {"bf16": 0.9077, "fp8": 0.8},
              "gemm_fixed_time_s": 5.15e-6}
    update_yaml(path, values, {"gemm_max_efficiency": "fitted: table"})
    once = path.read_text()
    update_yaml(path, values, {"gemm_max_efficiency": "fitted: table"})
    assert path.read_text() == once
    assert once.startswith("# a comment\n") and "gemm_max_efficiency: 0.9077\n" in once
    assert "gemm_efficiency_by_precision: {bf16: 0.9077, fp8: 0.8}\n" in once
    assert once.index("gemm_fixed_time_s") < once.index("provenance:")  # new keys go before provenance
    assert '  gemm_max_efficiency: "fitted: table"\n' in once and '  peaks: "datasheet"' in once


@pytest.mark.parametrize("cluster,table_gpu,ranks", [("gb200_nvl72x16", "GB200", (8, 16, 32, 64)),
                                                     ("gb300_nvl72x16", "GB300", (8, 16, 32, 64)),
                                                     ("b200x1024", "B200", (8,))])
def test_expert_all_to_all_at_the_rows_group_sizes_is_the_measured_one(cluster, table_gpu, ranks):
    """The EP groups (8-64 ranks) and dispatch buffers (64-576 MiB) of the MoE Blackwell rows: every measured
    all-to-all within -6..+11% (vtrain 0.94-1.11 x measured; docs/moe.md, bench/a2a_check.py): the GPT-OSS EP64 rows'
    -26..-37% is not a cheap all-to-all at many ranks."""
    cfg = compose(["+model=gpt_1_7b", f"+cluster={cluster}"])
    c = cluster_spec(cfg.cluster, gpu_spec(cfg.gpu))
    t = read_xla_table(table_gpu, "all_to_all")
    for n in ranks:
        rows = t.where((t.n == n) & (t.size >= 2**26) & (t.size < 2**30))
        assert len(rows.time_s) >= 4
        pred = [collective_time_s(CollectiveKind.ALL_TO_ALL, s, GroupPlacement(n, n), c) for s in rows.size]
        ratio = np.asarray(pred) / rows.time_s
        assert ratio.min() >= 0.94 and ratio.max() <= 1.11


@pytest.mark.parametrize("precision,lo,hi", [("bf16", -5.0, 0.0), ("fp8", 2.0, 12.0)])
def test_b200_curve_is_not_fast_at_the_expert_gemm_shapes(precision, lo, hi):
    """docs/moe.md ("Not the grouped GEMM's shape"): the per-expert GEMMs of the Blackwell MoE rows (m >= 2,048
    rows, n, k >= 1,024, four concurrent on TE's streams) are priced within a few percent of the B200 table, and at
    batch 4 fp8 slower than measured (+9%, 4096x2048x2048 x4: 54.1 us priced, 47.6 us measured): the MoE rows that
    read 14-35% fast do not get it from the expert GEMMs' shape efficiency."""
    g = gpu_spec(load_gpu_config("b200"))
    curve = GemmCurve.for_gpu(g, precision)
    t = read_gemm_table("B200", precision, g.peak_tflops[precision])
    pick = (t.m >= 2048) & (t.n >= 1024) & (t.k >= 1024) & (t.b == 4)
    pred = np.array([curve.compute_time_s(int(m), int(n), int(k), 4) for m, n, k in zip(t.m[pick], t.n[pick],
                                                                                          t.k[pick])])
    signed = float(np.mean(pred / np.asarray(t.time_s[pick]) - 1) * 100)
    assert int(pick.sum()) == 18
    assert lo <= signed <= hi
