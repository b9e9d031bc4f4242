"""Qwen3-30B-A3B across Megatron-Bridge releases: what bounds each published row (issue 39; docs/moe.md).

    python bench/qwen3_30b_rows.py

For every Qwen3-30B-A3B row of published_runs, simulated as task=validate does it (shipped constants, the
release's recipe cells): measured and predicted iteration time, the GPU time (compute + exposed communication),
the host's issue time, and measured / GPU. Two what-ifs, each printed beside the row it concerns:

- ``graphed``: the 25.09 Blackwell rows with the whole iteration replayed from a CUDA graph, as their script ran
  it (scripts/performance/configs/qwen3/qwen3_30b_a3b_llm_pretrain.py: ``cuda_graph_impl="local"``,
  ``cuda_graph_scope="full_iteration"``, with ``apply_moe_token_drop``): no host launch cost left;
- ``serial``: GPU time + host issue time, an upper bound of any host-side model (a host that never overlaps the
  GPU, every sync exposed): where the measurement exceeds even it, no host cost explains the row.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Optional, Tuple

from vtrain import compose
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.report import Report
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.published import pasted_row
from vtrain.validation.run import check_measured_ms, measured_ms, simulate_row

GRAPHED = {"cuda_graph_scope": "full_iteration"}  # the 25.09 Blackwell script's CUDA graph


def _simulate(raw: MeasuredRow, extra: Optional[Dict[str, str]], cfg: Any, gpu: Any, stack: Any
              ) -> Tuple[Report, float]:
    """The row's report and measured iteration time (s), with ``extra`` cells where given."""
    if extra:
        raw = MeasuredRow(raw.index, {**raw.values, **extra})
    row, _ = pasted_row(raw)
    w, rep, _ = simulate_row(row, cfg, gpu, stack, None, None)
    return rep, check_measured_ms(row, measured_ms(row, w)[0]) / 1e3


def _gpu(raw: MeasuredRow) -> str:
    return raw.get("gpu") or raw.get("gpu_type") or ""


def _host_issue_s(rep: Report) -> float:
    b = rep.breakdown
    return sum(sum(s.busy_s.values()) for s in b.streams if s.stream == "host")


def main() -> None:
    cfg = compose(["+cluster=h100x1024"], require=False)
    gpu, stack = functools.lru_cache(None)(load_gpu_config), functools.lru_cache(None)(load_stack_config)
    rows = [r for r in read_measurements(resolve_dataset("published_runs"))
            if (r.get("model") or "").lower().startswith("qwen3_30b")]
    print(f"{'row_id':>6} {'source':24} {'gpu':14} {'mb':>2} {'meas s':>7} {'pred s':>7} {'err':>7} {'GPU s':>6} "
          f"{'host s':>6} {'meas/GPU':>8}  what-if")
    for raw in rows:
        rep, meas = _simulate(raw, None, cfg, gpu, stack)
        b = rep.breakdown
        gpu_s, host_s = b.compute_s + b.exposed_comm_s + b.optimizer_s, _host_issue_s(rep)
        what = f"serial {gpu_s + host_s:.2f} s ({(gpu_s + host_s) / meas - 1:+.1%})"
        release, label, gpu_name = raw.get("source_key") or "", raw.get("model") or "", _gpu(raw)
        if release.endswith("25.09") and "tokendrop" in label and "H100" not in gpu_name:
            graphed, _ = _simulate(raw, GRAPHED, cfg, gpu, stack)
            what = f"graphed {graphed.iteration_time_s:.2f} s ({graphed.iteration_time_s / meas - 1:+.1%})"
        print(f"{raw.get('row_id'):>6} {release:24} {gpu_name[:14]:14} "
              f"{raw.get('micro_batch'):>2} {meas:7.2f} {rep.iteration_time_s:7.2f} "
              f"{rep.iteration_time_s / meas - 1:+7.1%} {gpu_s:6.2f} {host_s:6.2f} {meas / gpu_s:8.2f}  {what}")


if __name__ == "__main__":
    main()
