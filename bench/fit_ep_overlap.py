"""Fit the share of a fused pair's all-to-all that Megatron-Core's combined 1F1B hides (stack
``ep_overlap_hidden_share``, vtrain.sim.overlap) on the one plan measured with and without it, and show it on
runs it did not see.

The ModelZoo's H100 table (vtrain/data/modern_gpus/megatron_moe_qwen3_h100.csv) runs Qwen3-235B-A22B on 256 H100
at TP2 PP8 VP4 EP32 with DeepEP twice: row 1 without and row 2 with ``--overlap-moe-expert-parallel-comm``
(19.7 and 17.6 s). The share is fitted to the measured ratio of the two (17.6 / 19.7), so that the plan's own
error, which both rows share, does not enter it. Held out: Megatron-Bridge 26.02 and 26.02.01's Qwen3-235B on
256 H100 (the same layout, global batch 8192, NCCL all-to-all, moe_a2a_overlap=True in the release's H100 V2
preset) and the release before them without the overlap (25.11, global batch 2048).

    python bench/fit_ep_overlap.py
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, List, Tuple

import vtrain.graph.builder  # noqa: F401  (import order: graph before comm)
from vtrain import compose
from vtrain.api import cost_model_for
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.csv_io import read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.published_rows import published_rows


def predicted_s(w: Any, share: float) -> float:
    w = replace(w, stack=replace(w.stack, ep_overlap_hidden_share=share))
    return simulate_workload(w, cost_model_for(w))[0].iteration_time_s


def modelzoo_pair() -> Tuple[Tuple[Any, float], Tuple[Any, float]]:
    """(workload, measured s) of ModelZoo rows 1 (no overlap) and 2 (overlap): the same plan otherwise."""
    from vtrain.validation.rows import row_workload

    cfg = compose(["+cluster=h100x1024"], require=False)
    rows = read_measurements(resolve_dataset("megatron_moe_qwen3_h100"))[:2]
    out = [(row_workload(r, cfg.cluster, functools.lru_cache(None)(load_gpu_config), load_stack_config,
                         stack="megatron_core_te"), float(r.values["iteration_time_ms"]) / 1e3) for r in rows]
    (w1, _), (w2, _) = out
    assert not w1.plan.overlap_moe_comm and w2.plan.overlap_moe_comm
    assert replace(w2.plan, overlap_moe_comm=False) == w1.plan
    return out[0], out[1]


def fit_share(tol: float = 1e-4) -> float:
    """The share at which the predicted ratio row 2 / row 1 equals the measured one (bisection: the ratio falls
    as the share grows)."""
    (w1, m1), (w2, m2) = modelzoo_pair()
    target, base = m2 / m1, predicted_s(w1, 1.0)
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if predicted_s(w2, mid) / base > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def held_out() -> List[Tuple[str, Any, float]]:
    """Megatron-Bridge's Qwen3-235B rows on 256 H100 (published_runs): with the overlap (26.02, 26.02.01) and
    without (25.11)."""
    out = []
    for pr in published_rows():
        w = pr.workload
        if w is None or w.model.num_experts != 128 or w.plan.num_gpus != 256 or w.cluster.gpu.name != "h100_sxm":
            continue
        out.append((f"{pr.source_key} (overlap {'on' if w.plan.overlap_moe_comm else 'off'})", w, pr.measured_s))
    return out


def main() -> None:
    share = fit_share()
    (w1, m1), (w2, m2) = modelzoo_pair()
    print(f"fitted on ModelZoo rows 1-2 (measured {m2:.1f} / {m1:.1f} s = {m2 / m1:.3f}): "
          f"ep_overlap_hidden_share = {share:.3f}")
    for name, w, m in [("ModelZoo row 1 (overlap off)", w1, m1), ("ModelZoo row 2 (overlap on)", w2, m2),
                       *held_out()]:
        errs = [100.0 * (predicted_s(w, x) / m - 1.0) for x in (1.0, share)]
        print(f"  {name:45s} measured {m:6.1f} s  error at share 1.0: {errs[0]:+6.1f}%  "
              f"at {share:.2f}: {errs[1]:+6.1f}%")


if __name__ == "__main__":
    main()
