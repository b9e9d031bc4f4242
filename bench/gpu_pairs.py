"""One job on two GPUs: the measured speed ratio of every pair of published rows that differ only in their GPU (and
the layout the release's preset gives that GPU), beside vtrain's (issue 39: GB300 dense reads slow).

    python bench/gpu_pairs.py                     # simulate the shipped published runs as task=validate does
    python bench/gpu_pairs.py --gpus gb300,gb200  # only pairs of these two GPUs

A pair is two rows of one source (one release's table) with the same model, precision and global batch on two
GPU types; its measured ratio is the rate of the first over the second (tokens/s per GPU), vtrain's the same from
the predicted times. The ratio of the two ratios is the GPU-to-GPU error the pair isolates: whatever a release's
software does to both runs of a model cancels, what differs is the GPU and the preset's layout for it.
"""
from __future__ import annotations

import math
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from vtrain.io.args import ArgumentParser
from vtrain.validation.names import gpu_key
from vtrain.validation.published_rows import PublishedRow, published_rows

Key = Tuple[str, str, str, str]


def _plan(p: PublishedRow) -> str:
    w = p.workload
    assert w is not None
    q = w.plan
    return f"tp{q.tp} pp{q.pp} vp{q.chunks} cp{q.cp} mb{q.micro_batch_size} {q.recompute.value}"


def _rate_s(p: PublishedRow, predicted: Optional[float] = None) -> float:
    """Seconds per token per GPU (measured, or ``predicted`` iteration seconds)."""
    w = p.workload
    assert w is not None
    tokens = w.plan.global_batch_size * w.plan.seq_len / w.plan.num_gpus
    return (p.measured_s if predicted is None else predicted) / tokens


def pairs(rows: Sequence[PublishedRow], predicted: Dict[int, float], gpus: Optional[Tuple[str, str]] = None
          ) -> List[Tuple[PublishedRow, PublishedRow, float, float]]:
    """(first, second, measured first/second speed, predicted first/second speed) of each pair."""
    groups: Dict[Key, List[PublishedRow]] = defaultdict(list)
    for p in rows:
        if p.workload is None or p.row.index not in predicted:
            continue
        w = p.workload
        groups[(p.source_key, w.model.name, w.plan.precision.value, str(w.plan.global_batch_size))].append(p)
    out = []
    for members in groups.values():
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                ga, gb = a.workload.cluster.gpu.name, b.workload.cluster.gpu.name  # type: ignore[union-attr]
                if ga == gb:
                    continue
                if gpus is not None and {ga, gb} != set(gpus):
                    continue
                if gpus is not None and ga != gpus[0]:
                    a, b = b, a
                meas = _rate_s(b) / _rate_s(a)
                pred = _rate_s(b, predicted[b.row.index]) / _rate_s(a, predicted[a.row.index])
                out.append((a, b, meas, pred))
    return out


def main(argv: List[str]) -> int:
    from vtrain import compose
    from vtrain.cost.analytical import AnalyticalCostModel
    from vtrain.sim.simulator import simulate_workload

    ap = ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="", help="two gpu/ names, e.g. gb300,gb200 (default: every pair)")
    args = ap.parse_args(argv)
    chosen = tuple(gpu_key(g) for g in args.gpus.split(",")) if args.gpus else None
    if chosen is not None and len(chosen) != 2:
        ap.error("--gpus takes two GPU names")
    compose([], require=False)  # Hydra's search path, as the validator has it
    rows = published_rows()
    predicted = {p.row.index: simulate_workload(p.workload, AnalyticalCostModel(p.workload))[0].iteration_time_s
                 for p in rows if p.workload is not None}
    found = pairs(rows, predicted, chosen)  # type: ignore[arg-type]
    print("row  row  source      model           precision  gpu (plan) / gpu (plan): measured, vtrain speed ratio, "
          "vtrain / measured")
    logs = []
    for a, b, meas, pred in sorted(found, key=lambda x: (x[0].source_key, x[0].row.index)):
        ga, gb = a.workload.cluster.gpu.name, b.workload.cluster.gpu.name  # type: ignore[union-attr]
        logs.append(math.log(pred / meas))
        print(f"{a.row.index:4d} {b.row.index:4d} {a.source_key.split('_')[-1]:11s} "
              f"{a.workload.model.name[:15]:15s} {a.workload.plan.precision.value:9s} "  # type: ignore[union-attr]
              f"{ga} ({_plan(a)}) / {gb} ({_plan(b)}): {meas:.3f}, {pred:.3f}, {pred / meas - 1:+.1%}")
    if logs:
        print(f"{len(logs)} pairs; geometric mean of vtrain / measured: {math.exp(sum(logs) / len(logs)) - 1:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
