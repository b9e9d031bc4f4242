"""Blackwell Ultra MoE rows read fast (issue 39): how much of each B300 / GB300 mixture-of-experts row's prediction
comes from what vtrain gives Blackwell Ultra over B200.

    python bench/ultra_moe_rows.py

For every published B300 / GB300 MoE row (simulated as task=validate does it, shipped constants, the release's
recipe cells): the predicted time with the part's own constants, then with one group of them replaced by B200's
(``gemm``: the GEMM efficiencies and ceilings, the power-limited clock law's 1.087x / 1.178x; ``flash``: the fused
attention efficiency, the law's rate times the doubled-SFU 1.128; ``hbm``: 8 TB/s over 7.7; ``all``: every one of
them and the SM count, power and exp head dim), and measured / GPU time (compute + exposed communication +
optimizer). A part priced as B200 that still reads fast is fast for a reason that is not its GPU constants.
"""
from __future__ import annotations

import copy
import functools
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import OmegaConf

from vtrain import compose
from vtrain.config.compose import load_gpu_config, load_stack_config
from vtrain.validation.csv_io import read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.published import pasted_row
from vtrain.validation.run import check_measured_ms, measured_ms, simulate_row

ULTRA = ("b300", "gb300")
GROUPS: Dict[str, Tuple[str, ...]] = {
    "gemm": ("gemm_max_efficiency", "gemm_efficiency_by_precision", "gemm_ceiling_by_precision"),
    "flash": ("flash_attention_efficiency",),
    "hbm": ("hbm_bandwidth_gb_per_s",),
}
GROUPS["all"] = GROUPS["gemm"] + GROUPS["flash"] + GROUPS["hbm"] + ("num_sms", "tdp_w", "idle_w",
                                                                       "flash_attention_exp_head_dim")


def _loader(keys: Tuple[str, ...]) -> Any:
    """load_gpu_config with ``keys`` of the Blackwell Ultra parts set to B200's."""
    b200 = load_gpu_config("b200")

    @functools.lru_cache(None)
    def load(name: str) -> Any:
        g = load_gpu_config(name)
        if name not in ULTRA or not keys:
            return g
        g = copy.deepcopy(g)
        for k in keys:
            OmegaConf.update(g, k, copy.deepcopy(b200[k]), merge=False)
        return g
    return load


def _predict(raw: Any, cfg: Any, gpu: Any, stack: Any) -> Tuple[float, float, float]:
    """(predicted s, measured s, GPU s) of one row."""
    row, _ = pasted_row(raw)
    w, rep, _ = simulate_row(row, cfg, gpu, stack, None, None)
    b = rep.breakdown
    meas = check_measured_ms(row, measured_ms(row, w)[0]) / 1e3
    return rep.iteration_time_s, meas, b.compute_s + b.exposed_comm_s + b.optimizer_s


def main() -> None:
    cfg = compose(["+cluster=h100x1024"], require=False)
    stack = functools.lru_cache(None)(load_stack_config)
    loaders = {"shipped": _loader(())} | {f"b200 {g}": _loader(keys) for g, keys in GROUPS.items()}
    rows = [r for r in read_measurements(resolve_dataset("published_runs"))
            if (r.get("arch_type") or "") == "moe"
            and any(u in (r.get("gpu") or r.get("gpu_type") or "").lower().split()[0] for u in ULTRA)]
    print(f"{'row_id':>6} {'source':24} {'model':16} {'gpu':8} {'mb':>2} {'meas s':>7} {'meas/GPU':>8}  "
          + " ".join(f"{k:>11}" for k in loaders))
    for raw in rows:
        errs: List[str] = []
        ratio: Optional[float] = None
        for load in loaders.values():
            pred, meas, gpu_s = _predict(raw, cfg, load, stack)
            ratio = meas / gpu_s if ratio is None else ratio
            errs.append(f"{pred / meas - 1:+11.1%}")
        print(f"{raw.get('row_id'):>6} {raw.get('source_key') or '':24} {(raw.get('model') or '')[:16]:16} "
              f"{(raw.get('gpu') or raw.get('gpu_type') or '')[:8]:8} {raw.get('micro_batch'):>2} {meas:7.2f} "
              f"{ratio:8.2f}  " + " ".join(errs))


if __name__ == "__main__":
    main()
