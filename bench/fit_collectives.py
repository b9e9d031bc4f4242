"""Fit the collective model per NVLink fabric to XLA's measured collective table; cross-check it.

    python bench/fit_collectives.py           # fit, cross-validate, cross-check; print the figures
    python bench/fit_collectives.py --write   # ... and write conf/cluster/_fabric_*.yaml (generated)

Fabrics (link bandwidth per GPU per direction, datasheet): 8xH100 NVLink4/NVSwitch 450 GB/s, 8xB200
NVLink5 900 GB/s, GB200 and GB300 NVL72 NVLink5 900 GB/s across 18 trays. Per fabric x kind: median
and p90 |error| of the collective time in sample and held out (leave-one-group-size-out; every 4th
message size held out). Cross-checks: 8xH200 and 8xB200 nccl-tests/all_reduce_bench sweeps, NVLS on/off,
16 GiB all-gather/reduce-scatter (MLENG); the scale-out tier fitted to 2x8 H100 nccl-tests (A3 Mega)
and checked on the 4-node B200/H200 rows; p2p bandwidth matrices.
"""
from __future__ import annotations

import datetime
import sys
from dataclasses import replace
from typing import Dict, List, Tuple

import numpy as np
from scipy.optimize import least_squares

from vtrain.calibration.collective_tables import (
    KindParams,
    errors_pct,
    fit_kind,
    leave_one_out_pct,
    median_p90,
    predict_s,
    read_a3mega,
    read_mleng_collectives,
    read_p2p_bandwidth,
    read_xla_table,
    tier_fields,
)
from vtrain.config.compose import CONF_DIR
from vtrain.cost.collectives import GroupPlacement, collective_time_s
from vtrain.graph.ops import CollectiveKind
from vtrain.io.args import ArgumentParser
from vtrain.workload.system import GB, ClusterSpec, GpuSpec, NetworkTier

FABRICS = {"H100": 450.0, "B200": 900.0, "GB200": 900.0, "GB300": 900.0}
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
FILES = {"H100": "_fabric_hgx_h100", "B200": "_fabric_hgx_b200", "GB200": "_fabric_gb200_nvl72",
         "GB300": "_fabric_gb300_nvl72"}
A3MEGA_NODE_GB_PER_S = 200.0  # a3-megagpu-8g: 8 x 200 Gb/s GPUDirect-TCPXO NICs per node


def tier_of(fields: Dict[str, object], bandwidth: float) -> NetworkTier:
    return NetworkTier(bandwidth_gb_per_s=bandwidth, **fields)  # type: ignore[arg-type]


def cluster_of(intra: NetworkTier, inter: NetworkTier, gpus_per_node: int, nodes: int, overlap: float) -> ClusterSpec:
    gpu = GpuSpec(name="fit", hbm_capacity_gib=80.0, hbm_bandwidth_gb_per_s=3350.0)
    return ClusterSpec(name="fit", gpu=gpu, gpus_per_node=gpus_per_node, num_nodes=nodes, intra_node=intra,
                       inter_node=inter, hierarchical_overlap=overlap)


def fit_fabrics() -> Tuple[Dict[str, Dict[str, KindParams]], Dict[str, List[str]]]:
    params: Dict[str, Dict[str, KindParams]] = {}
    report: Dict[str, List[str]] = {}
    for gpu, link_gb in FABRICS.items():
        link = link_gb * GB
        params[gpu], lines, pooled = {}, [], []
        for kind in KINDS:
            t = read_xla_table(gpu, kind)
            p = fit_kind(t, link, nvls=True)
            params[gpu][kind] = p
            e = errors_pct(predict_s(p, t, link, kind), t.time_s)
            pooled.append(e)
            if kind == "p2p":
                lines.append(f"  {kind:15s} in sample {median_p90(e)}   (collective-permute, one peer per rank)")
                continue
            cv_n = leave_one_out_pct(t, link, "n", nvls=True)
            cv_s = leave_one_out_pct(t, link, "size", nvls=True)
            lines.append(f"  {kind:15s} in sample {median_p90(e)} | held-out group size {median_p90(cv_n)} | "
                         f"held-out sizes {median_p90(cv_s)}")
        e_all = np.concatenate(pooled[:4])
        lines.insert(0, f"{gpu} ({link_gb:.0f} GB/s per GPU): all four collectives {median_p90(e_all)}")
        report[gpu] = lines
    return params, report


def fit_scale_out(h100: NetworkTier) -> Tuple[NetworkTier, float, np.ndarray]:
    """Scale-out tier (Simple latency and efficiency, LL as fractions of them) and the phase overlap, from the
    2x8 H100 all-reduce with the H100 NVLink fit inside each node."""
    t = read_a3mega()
    where = GroupPlacement(16, 8)

    def model(x: np.ndarray) -> Tuple[np.ndarray, NetworkTier, float]:
        inter = NetworkTier(bandwidth_gb_per_s=A3MEGA_NODE_GB_PER_S, latency_s=x[0] * 1e-6, step_latency_s=0.0,
                            efficiency=x[1], ll_latency_s={"all_reduce": x[0] * x[3] * 1e-6},
                            ll_efficiency={"all_reduce": x[1] * x[4]})
        c = cluster_of(h100, inter, 8, 2, x[2])
        pred = np.asarray([collective_time_s(CollectiveKind.ALL_REDUCE, s, where, c) for s in t.size])
        return pred, inter, float(x[2])

    r = least_squares(lambda x: np.log(model(x)[0] / t.time_s), [100.0, 0.8, 0.5, 0.5, 0.3],
                      bounds=([0, 0.05, 0, 0, 0.01], [2000, 1.0, 1.0, 1.0, 1.0]), loss="soft_l1", f_scale=0.1)
    pred, inter, overlap = model(r.x)
    return inter, overlap, errors_pct(pred, t.time_s)


IB_LATENCY_S, IB_STEP_LATENCY_S = 30e-6, 5e-6  # assumed (as the A100 clusters): no IB/RoCE latency in the data


def mleng_checks(tiers: Dict[str, NetworkTier], inter: NetworkTier, overlap: float) -> List[str]:
    """Predicted vs MLENG measurements (8xH200 on the H100 fabric fit, 8xB200 on B200's; 4 nodes)."""
    rows = read_mleng_collectives()
    kinds = {"all_reduce": CollectiveKind.ALL_REDUCE, "all_gather": CollectiveKind.ALL_GATHER,
             "reduce_scatter": CollectiveKind.REDUCE_SCATTER}
    nic = {"H200": 400.0, "B200": 400.0}  # p5en: 16 x 200 Gb/s EFA; p6-b200: 8 x 400 Gb/s EFA, per node
    out: List[str] = []
    groups: Dict[str, List[float]] = {}
    for r in rows:
        gpu = "H200" if r.gpu.startswith("H200") else "B200"
        fabric = tiers["H100" if gpu == "H200" else "B200"]
        if "disabled" in r.nvls or r.nvls == "NCCL_NVLS_ENABLE=0" or "forced" in r.algo and "Ring" in r.algo:
            fabric = replace(fabric, nvls_efficiency=0.0)
        intra_n = min(r.num_gpus, 8)
        c = cluster_of(fabric, replace(inter, bandwidth_gb_per_s=nic[gpu]), 8, r.num_nodes, overlap)
        where = GroupPlacement(r.num_gpus, intra_n)
        pred = collective_time_s(kinds[r.op], r.size_bytes, where, c)
        label = f"{r.record_id} ({'NVLS off' if fabric.nvls_efficiency == 0 else 'default'})"
        groups.setdefault(label, []).append(abs(pred / r.time_s - 1) * 100)
    for label, e in groups.items():
        out.append(f"  {label:62s} median {np.median(e):5.1f}%  max {np.max(e):5.1f}%  (n={len(e)})")
    return out


def write_fabric(gpu: str, fields: Dict[str, object], head: List[str], date: str) -> None:
    path = CONF_DIR / "cluster" / f"{FILES[gpu]}.yaml"
    lines = [f"# GENERATED by `python bench/fit_collectives.py --write` ({date}); do not edit by hand.",
             *[f"# {h}" for h in head], "intra_node:"]
    for key, value in fields.items():
        if isinstance(value, dict):
            body = ", ".join(f"{k}: {v}" for k, v in value.items())
            lines.append(f"  {key}: {{{body}}}")
        else:
            lines.append(f"  {key}: {value}")
    path.write_text("\n".join(lines) + "\n")


def main(argv: List[str]) -> int:
    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write conf/cluster/_fabric_*.yaml")
    args = ap.parse_args(argv)
    date = datetime.date.today().strftime("%Y-%m")
    params, report = fit_fabrics()
    print("Collective model fit to vtrain/data/modern_gpus/xla_collective_perf_table.csv "
          "(time; |predicted/measured - 1|)")
    tiers = {}
    for gpu, lines in report.items():
        print("\n" + "\n".join(lines))
        fields = tier_fields(params[gpu])
        tiers[gpu] = tier_of(fields, FABRICS[gpu])
        ar = params[gpu]["all_reduce"]
        print(f"  all_reduce: ring e={ar.efficiency:.3f}  LL e={ar.ll_efficiency:.3f}  "
              f"NVLS e={ar.nvls_efficiency:.3f} a={ar.nvls_latency_s * 1e6:.1f} us")
        if args.write:
            head = [f"{gpu} NVLink fabric, {FABRICS[gpu]:.0f} GB/s per GPU per direction (datasheet); constants fitted",
                    "to vtrain/data/modern_gpus/xla_collective_perf_table.csv (XLA's measured collective table:",
                    "median of 20 runs, F32, groups of 2..72, 1 KiB..32 GiB): " + lines[0].split(": ", 1)[1] + ".",
                    "Per-kind constants: see vtrain/cost/collectives.py; README: Accuracy."]
            write_fabric(gpu, {"bandwidth_gb_per_s": FABRICS[gpu], **fields}, head, date)
    inter, overlap, e = fit_scale_out(tiers["H100"])
    print(f"\nScale-out tier, 2 x 8 H100 all-reduce (nccl-tests, A3 Mega TCPXO, {A3MEGA_NODE_GB_PER_S:.0f} GB/s per "
          f"node): Simple latency {inter.latency_s * 1e6:.0f} us, efficiency {inter.efficiency:.3f}; LL latency "
          f"{inter.ll_latency_s['all_reduce'] * 1e6:.0f} us, efficiency {inter.ll_efficiency['all_reduce']:.3f}; "
          f"phase overlap {overlap:.2f}: {median_p90(e)}")
    ib = NetworkTier(bandwidth_gb_per_s=A3MEGA_NODE_GB_PER_S, latency_s=IB_LATENCY_S,
                     step_latency_s=IB_STEP_LATENCY_S, efficiency=inter.efficiency)
    if args.write:
        path = CONF_DIR / "cluster" / "_scaleout_ib.yaml"
        path.write_text(
            f"# GENERATED by `python bench/fit_collectives.py --write` ({date}); do not edit by hand.\n"
            "# Scale-out (InfiniBand / RoCE / EFA) tier: a cluster states its NIC bandwidth per node. The bandwidth\n"
            "# efficiency and the overlap of the intra- and inter-node phases are fitted to 2 nodes x 8 H100\n"
            "# nccl-tests all_reduce_perf (GCP A3 Mega, GPUDirect-TCPXO, 8 x 200 Gb/s per node; vtrain/data/\n"
            f"# modern_gpus/nccl_tests_h100_2x8_a3mega_allreduce.csv; {median_p90(e)}) and transferred;\n"
            f"# the latencies are assumed ({IB_LATENCY_S * 1e6:.0f} us per call, {IB_STEP_LATENCY_S * 1e6:.0f} us "
            f"per step, as the A100 clusters):\n"
            f"# TCPXO's fitted ones ({inter.latency_s * 1e6:.0f} us Simple, "
            f"{inter.ll_latency_s['all_reduce'] * 1e6:.0f} us LL) are not InfiniBand's.\n"
            f"hierarchical_overlap: {overlap:.3g}\n"
            "inter_node:\n"
            f"  latency_s: {IB_LATENCY_S:.3g}\n  step_latency_s: {IB_STEP_LATENCY_S:.3g}\n"
            f"  efficiency: {inter.efficiency:.4g}\n")
    print("\nCross-checks (MLENG; 8xH200 on the H100 fabric fit, B200 on B200's; 4 nodes with the scale-out fit):")
    print("\n".join(mleng_checks(tiers, inter, overlap)))
    print("  ... 4-node rows with the shipped IB tier (TCPXO fit's efficiency and overlap, assumed IB latency):")
    print("\n".join(line for line in mleng_checks(tiers, ib, overlap) if "4node" in line))
    p2p = read_p2p_bandwidth()
    for gpu, bw in p2p.items():
        fabric = "H100" if gpu == "H100" else "GB200"
        eff = params[fabric]["p2p"].efficiency
        print(f"  p2p {gpu}: p2pBandwidthLatencyTest {bw:.0f} GB/s ({bw / FABRICS[fabric]:.2f} of the link) vs the "
              f"fitted NCCL send/recv efficiency {eff:.2f} ({eff * FABRICS[fabric]:.0f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
