"""Measured data shipped with vtrain (vtrain/data, sources in vtrain/data/README.md), as workloads."""
from __future__ import annotations

import functools
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Tuple

import numpy as np

from vtrain.errors import ConfigError

if TYPE_CHECKING:
    from vtrain.workload.workload import Workload

SHIPPED = {
    "a100_single_node": "a100_single_node_iteration_times.csv",
    "megatron_2021_weak_scaling": "megatron_2021_weak_scaling.csv",
    "torchtitan": "modern_gpus/torchtitan_rows.csv",  # bench/torchtitan_rows.py
    "megatron_moe_qwen3_h100": "modern_gpus/megatron_moe_qwen3_h100.csv",  # bench/make_moe_csv.py
    "megatron_moe_qwen3_blackwell": "modern_gpus/megatron_moe_qwen3_blackwell.csv",  # bench/make_moe_csv.py
    # 247 published runs of 8 sources, each row naming its framework (published_runs/README.md)
    "published_runs": "published_runs/published_runs_calibration.csv",
}
# the shipped sets whose rows name their own framework: each row takes that stack's defaults
ROW_STACK = ("published_runs",)
# the software stack each shipped measurement ran on (rows without a ``stack`` column)
SHIPPED_STACK = {"a100_single_node": "megatron_deepspeed_2022", "megatron_2021_weak_scaling": "megatron_lm_2021",
                 "torchtitan": "torchtitan_fsdp2", "megatron_moe_qwen3_h100": "megatron_core_te",
                 "megatron_moe_qwen3_blackwell": "megatron_core_te"}


def shipped_defaults(name: str) -> Any:
    """What the rows of a shipped dataset leave unsaid (its software's own defaults): a RowDefaults; None
    for a CSV of one's own (each row's defaults follow its GPU: :func:`vtrain.validation.rows.era_defaults`)."""
    from vtrain.validation.rows import MEGATRON_CORE_DEFAULTS, MODERN_DEFAULTS, RowDefaults

    if name not in SHIPPED or name in ROW_STACK:
        return None
    if name == "megatron_moe_qwen3_blackwell":  # 4K rows set no recompute: Megatron-Core's, the first mode that fits
        # launched with Megatron-LM's own scripts, which accumulate and reduce bf16 gradients in fp32
        return replace(MEGATRON_CORE_DEFAULTS, plan={**MEGATRON_CORE_DEFAULTS.plan, "fp32_grads": True})
    return MODERN_DEFAULTS if name in ("torchtitan", "megatron_moe_qwen3_h100") else RowDefaults()


def data_path(filename: str) -> Path:
    return Path(str(resources.files("vtrain") / "data" / filename))


def resolve_dataset(name_or_path: str) -> Path:
    """A shipped dataset's name, or a path to a CSV file."""
    if name_or_path in SHIPPED:
        return data_path(SHIPPED[name_or_path])
    return Path(name_or_path).expanduser()


def single_node_workloads(cluster_cfg: Any, path: Path | None = None, stack: str | None = None,
                          field: str = "calibrate.data", defaults: Any = "shipped"
                          ) -> Tuple[List[Any], np.ndarray, List[Any]]:
    """(workloads, measured seconds, rows) of a measured-iteration CSV on the given cluster config (``field``:
    the config key that gave the path, for the one-line errors; ``defaults``: what rows leave unsaid, as for
    task=validate: "shipped" the A100 set's, None each row's GPU's era). A calibration fits one GPU's and one
    stack's constants, so every row must run on the first row's; a row that cannot be simulated, or whose
    measurement is no iteration time (1 ns .. 30,000 years), is a one-line error naming it."""
    from vtrain.config.compose import load_gpu_config, load_stack_config
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.rows import RowDefaults, row_workload
    from vtrain.validation.run import check_measured_ms, measured_ms

    where = f"{field}={path or 'a100_single_node'}"
    rows = read_measurements(path or data_path(SHIPPED["a100_single_node"]), field)
    load = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    row_defaults = RowDefaults() if defaults == "shipped" else defaults
    ws: List[Workload] = []
    measured: List[float] = []
    for r in rows:
        try:  # the row and its measured time as task=validate reads them (any time or throughput column)
            w = row_workload(r, cluster_cfg, load, load_stack, row_defaults, stack=stack)
            ms = check_measured_ms(r, measured_ms(r, w)[0])
        except ConfigError as err:
            raise ConfigError(f"{where}: {err if str(err).startswith('row ') else f'row {r.index}: {err}'}") from None
        first = ws[0] if ws else w
        if (w.cluster.gpu.name, w.stack.name) != (first.cluster.gpu.name, first.stack.name):
            raise ConfigError(f"{where}: row {r.index} runs on gpu={w.cluster.gpu.name} with stack={w.stack.name}, "
                              f"row {rows[0].index} on gpu={first.cluster.gpu.name} with stack={first.stack.name}: "
                              "a calibration fits one GPU's and one stack's constants (split the CSV)")
        ws.append(w)
        measured.append(ms / 1e3)
    return ws, np.array(measured), rows


def weak_scaling_workloads(cluster: Any = None) -> Tuple[List[Any], np.ndarray, List[Any]]:
    """(workloads, published iteration seconds, rows) of the Megatron-LM weak-scaling table, on the
    ``cluster`` config (default: :func:`vtrain.validation.weak_scaling.weak_scaling_cluster`)."""
    from vtrain.validation.weak_scaling import read_weak_scaling, row_workload, weak_scaling_cluster

    cluster = cluster or weak_scaling_cluster()
    from vtrain.workload.model import megatron_flops_per_iteration

    rows = read_weak_scaling(data_path(SHIPPED["megatron_2021_weak_scaling"]))
    ws = [row_workload(r, cluster, i + 1) for i, r in enumerate(rows)]
    measured = np.array([megatron_flops_per_iteration(r.global_batch, r.seq_len, r.layers, r.hidden, r.vocab, True)
                         / (r.published_tflops * 1e12 * r.num_gpus) for r in rows])
    return ws, measured, rows
