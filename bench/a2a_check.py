"""The expert all-to-all as vtrain prices it, against what measures it (issue 39/43: MoE rows on Blackwell read fast).

    python bench/a2a_check.py            # vtrain / XLA's measured all-to-all at the EP groups and buffers of the rows
    python bench/a2a_check.py --rows     # ... and each MoE Blackwell row of published_runs: error, a2a busy, plan
    python bench/a2a_check.py --cross-node   # the MoE rows whose EP group spans nodes: the network rate they imply

Part 1 prices each all-to-all of XLA's collective table (``xla_collective_perf_table.csv``: GB200/GB300 NVL72 at 4-72
ranks, B200/H100 8-GPU nodes) with the shipped fabric (``cost.collectives.collective_time_s``) and prints the ratio
by group size and full-buffer size band. The MoE rows' dispatch buffers are tokens x top-k x hidden x bytes
(GPT-OSS 120B at 4 x 4,096 tokens: 377 MB; Qwen3-30B-A3B at 8 x 4,096: ~0.5 GB; DeepSeek-V3 at 4,096: 235 MB+).
Part 2 simulates the rows as task=validate does (shipped constants) and prints the factor by which the
critical stage's exposed all-to-all would have to grow to close each gap.
"""
from __future__ import annotations

import functools
from typing import Dict, List, Tuple

import numpy as np

from vtrain import compose
from vtrain.calibration.collective_tables import read_xla_table
from vtrain.config.build import cluster_spec, gpu_spec
from vtrain.cost.collectives import GroupPlacement, collective_time_s
from vtrain.graph.ops import CollectiveKind
from vtrain.io.args import ArgumentParser

FABRICS = {"GB200": "gb200_nvl72x16", "GB300": "gb300_nvl72x16", "B200": "b200x1024", "H100": "h100x1024"}
BANDS: Tuple[Tuple[float, float], ...] = ((2**10, 2**20), (2**20, 2**24), (2**24, 2**26), (2**26, 2**30),
                                          (2**30, 2**35))
MOE_GPUS = ("B200", "B300", "GB200", "GB300")


def table_ratios(table_gpu: str) -> Dict[int, Dict[int, float]]:
    """Group size -> size band -> median of vtrain / measured all-to-all time."""
    cfg = compose(["+model=gpt_1_7b", f"+cluster={FABRICS[table_gpu]}"])
    c = cluster_spec(cfg.cluster, gpu_spec(cfg.gpu))
    t = read_xla_table(table_gpu, "all_to_all")
    pred = np.asarray([collective_time_s(CollectiveKind.ALL_TO_ALL, s, GroupPlacement(int(n), int(n)), c)
                       for n, s in zip(t.n, t.size)])
    out: Dict[int, Dict[int, float]] = {}
    for n in np.unique(t.n):
        for b, (lo, hi) in enumerate(BANDS):
            m = (t.n == n) & (t.size >= lo) & (t.size < hi)
            if m.any():
                out.setdefault(int(n), {})[b] = float(np.median(pred[m] / t.time_s[m]))
    return out


def print_table() -> None:
    labels = ["1K-1M", "1M-16M", "16M-64M", "64M-1G", ">=1G"]
    print("vtrain / measured all-to-all time (median per band of the full per-GPU buffer)")
    print(f"{'gpu':6s} {'ranks':>5s} " + " ".join(f"{x:>8s}" for x in labels))
    for gpu in FABRICS:
        for n, bands in table_ratios(gpu).items():
            print(f"{gpu:6s} {n:5d} " + " ".join(f"{bands[b]:8.2f}" if b in bands else f"{'':8s}"
                                                  for b in range(len(BANDS))))


def print_rows(cross_node: bool = False) -> None:
    """Each MoE Blackwell row (``cross_node``: each row of any GPU whose EP group spans nodes): the error at the
    shipped constants, the critical stage's all-to-all and the factor it would need to close the gap; across nodes
    also the per-GPU network rate that factor implies (vtrain prices NIC share x the tier's efficiency)."""
    from vtrain.comm.ep import DEEPEP_RDMA_EFFICIENCY, FLEX, a2a_efficiency, ep_placement
    from vtrain.config.compose import load_gpu_config, load_stack_config
    from vtrain.errors import ConfigError
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import resolve_dataset
    from vtrain.validation.published import pasted_row
    from vtrain.validation.run import check_measured_ms, measured_ms, simulate_row

    cfg = compose(["+cluster=h100x1024"], require=False)
    lg, ls = functools.lru_cache(None)(load_gpu_config), functools.lru_cache(None)(load_stack_config)
    print("row source model gpu plan | error | a2a busy (s), exposed (s) | a2a x needed to close the gap"
          + (" | GB/s per GPU: priced -> implied (share of the NIC line)" if cross_node else ""))
    lines: List[str] = []
    for raw in read_measurements(resolve_dataset("published_runs")):
        i = raw.index
        gpu = raw.get("gpu") or ""
        if raw.get("arch_type") != "moe" or not (cross_node or any(g in gpu for g in MOE_GPUS)):
            continue
        row, _ = pasted_row(raw)
        try:
            w, rep, _ = simulate_row(row, cfg, lg, ls, None, None)
        except ConfigError as err:  # a row task=validate skips is printed with its reason
            lines.append(f"{i:4d} skipped: {err}")
            continue
        p, c = w.plan, w.cluster
        if cross_node and ep_placement(p, c.domain_size).nodes <= 1:
            continue
        meas_s = check_measured_ms(row, measured_ms(row, w)[0]) / 1e3
        crit = rep.breakdown  # the critical stage: stage 0 of a PP16 DeepSeek-V3 plan holds one MoE layer of 4
        busy = max(s.busy_s.get("all_to_all", 0.0) for s in crit.streams)
        exposed = crit.exposed_comm_by_group.get("ep", 0.0)
        need = 1.0 + (meas_s - rep.iteration_time_s) / exposed if exposed > 0 else float("nan")
        source, model = (raw.get("source_key") or "")[16:], (raw.get("model") or "")[:16]
        line = (f"{i:4d} {source:8s} {model:16s} {gpu.split()[0]:6s} "
                f"tp{p.tp} pp{p.pp} ep{p.ep}/{c.domain_size} mb{p.micro_batch_size} "
                f"{p.moe_dispatcher.value:8s} | {rep.iteration_time_s / meas_s - 1:+6.1%} | "
                f"{busy:6.3f} {exposed:6.3f} | x{need:5.2f}")
        if cross_node:
            line_gbps = c.inter_node.bandwidth_bytes_per_s / c.gpus_per_node / 1e9
            # DeepEP / HybridEP move at DeepEP's measured RDMA rate, NCCL at the cluster's all-to-all one
            priced = line_gbps * (DEEPEP_RDMA_EFFICIENCY if p.moe_dispatcher in FLEX else a2a_efficiency(c))
            line += f" | {priced:5.1f} -> {priced / need:5.1f} ({priced / need / line_gbps:4.0%})"
        lines.append(line)
    print("\n".join(lines))


def main() -> None:
    ap = ArgumentParser(description=__doc__)
    ap.add_argument("--rows", action="store_true", help="also simulate the MoE Blackwell rows of published_runs")
    ap.add_argument("--cross-node", action="store_true",
                    help="only the MoE rows whose EP group leaves the NVLink domain, with the network rate they imply")
    args = ap.parse_args()
    if args.cross_node:
        print_rows(cross_node=True)
        return
    print_table()
    if args.rows:
        print_rows()


if __name__ == "__main__":
    main()
