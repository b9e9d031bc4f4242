"""The measured sources one calibration is fitted to and cross-validated on, each as workloads built once.

A *source* is one publication or measurement campaign: its rows share a software release, a cluster and a way
of measuring, so holding out a whole source (:mod:`vtrain.calibration.loso`) is what a new user's table looks
like to the model. Each row is read exactly as ``task=validate`` reads it (:func:`vtrain.validation.run.simulate_row`:
the row's stated cells, its dataset's defaults, an unstated micro-batch or recompute mode chosen at the shipped
constants); the chosen workload is then kept and only its constants change during a fit. A row the validator
skips (it cannot be simulated, or its measurement is more than 20x off: a unit error) is skipped here too,
with the validator's reason.

Large sources are fitted on a deterministic subsample (every k-th row, ``fit_every``) and reported on all
their rows: the 1,440 A100 single-node runs are fitted on every 16th (90 runs, every shape kept), so that the
whole calibration with its cross-validation runs in minutes on two cores.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from vtrain.errors import ConfigError

# the shipped datasets and the cluster each is read on (as the README's task=validate commands read them)
SHIPPED_CLUSTERS: Dict[str, str] = {
    "a100_single_node": "vtrain_a100",
    "torchtitan": "h100x1024",
    "megatron_moe_qwen3_h100": "h100x1024",
    "megatron_moe_qwen3_blackwell": "gb200_nvl72x16",
}
# every k-th row of a source enters the fit (all rows are reported): the A100 set's every 16th row (90) keeps all
# 18 (t, d, p) shapes, both hidden sizes, all 4 micro-batches and all 4 layer counts, as many rows as the largest
# published source (llm-foundry's 78)
FIT_EVERY: Dict[str, int] = {"a100_single_node": 16}


@dataclass(frozen=True)
class Source:
    """One source's simulated rows: workloads (as task=validate chose them at the shipped constants), measured
    iteration seconds, whether each was measured as a rate (its error is then |measured/predicted - 1|), the
    predictions at the shipped constants, each row's interval class, and the rows skipped with their reasons."""

    name: str
    workloads: Tuple[Any, ...]
    measured_s: np.ndarray
    rate: np.ndarray
    shipped_s: np.ndarray
    leaves: Tuple[str, ...]
    fit_every: int = 1
    skipped: Tuple[str, ...] = ()
    labels: Tuple[str, ...] = field(default=())  # each row's id in its file (row number), for the CSV

    @property
    def n(self) -> int:
        return len(self.workloads)

    @property
    def fit_index(self) -> np.ndarray:
        """The rows the fit sees (every ``fit_every``-th)."""
        return np.arange(0, self.n, self.fit_every)


def ape_pct(pred_s: np.ndarray, measured_s: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Absolute percentage error of the measured quantity: a time's |p - m| / m, a rate's |m / p - 1|."""
    out: np.ndarray = np.where(rate, np.abs(measured_s / pred_s - 1.0), np.abs(pred_s - measured_s) / measured_s)
    return out * 100.0


def cluster_cfg(name: str) -> Any:
    from omegaconf import OmegaConf

    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig

    return OmegaConf.create({"cluster": load_group_config("cluster", name, ClusterConfig)})


def rows_source(name: str, rows: Sequence[Any], cfg: Any, defaults: Any, stack: Optional[str],
                fit_every: int = 1, prepare: Optional[Callable[[Any], Any]] = None) -> Source:
    """A source from measured rows, each simulated as task=validate simulates it on ``cfg.cluster``
    (``prepare``: what the validator does to a row first, e.g. reading a pasted table's cells)."""
    from vtrain.config.compose import load_gpu_config, load_stack_config
    from vtrain.sim.simulator import host_fraction, leaf_regime
    from vtrain.validation.run import check_measured_ms, check_plausible, measured_ms, simulate_row

    load_gpu = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    ws: List[Any] = []
    meas: List[float] = []
    rate: List[bool] = []
    shipped: List[float] = []
    leaves: List[str] = []
    labels: List[str] = []
    skipped: List[str] = []
    for row in rows:
        try:
            row = prepare(row) if prepare is not None else row
            w, report, _ = simulate_row(row, cfg, load_gpu, load_stack, defaults, stack)
            ms, quantity = measured_ms(row, w)
            check_measured_ms(row, ms)
            check_plausible(row, ms, report.iteration_time_s * 1e3)
        except ConfigError as err:
            skipped.append(" ".join(str(err).split()))
            continue
        ws.append(w)
        meas.append(ms / 1e3)
        rate.append(quantity != "iteration_time_ms")
        shipped.append(report.iteration_time_s)
        leaves.append(leaf_regime(w, report.provenance, host_fraction(report)))
        labels.append(str(row.index))
    return Source(name, tuple(ws), np.array(meas), np.array(rate, dtype=bool), np.array(shipped), tuple(leaves),
                  fit_every, tuple(skipped), tuple(labels))


def shipped_source(name: str) -> Source:
    """A shipped dataset (vtrain.validation.datasets.SHIPPED) read as task=validate reads it."""
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import SHIPPED_STACK, resolve_dataset, shipped_defaults

    rows = read_measurements(resolve_dataset(name))
    return rows_source(name, rows, cluster_cfg(SHIPPED_CLUSTERS[name]), shipped_defaults(name), SHIPPED_STACK[name],
                       FIT_EVERY.get(name, 1))


def weak_scaling_source() -> Source:
    """The Megatron-LM 2021 weak-scaling table (SC'21 Table 1), each row as examples/sc21 ran it; measured as
    the time its published TFLOP/s gives (an iteration time, as task=calibrate has always scored it)."""
    from vtrain.cost.analytical import AnalyticalCostModel
    from vtrain.sim.simulator import host_fraction, leaf_regime, simulate_workload
    from vtrain.validation.datasets import weak_scaling_workloads

    ws, measured, rows = weak_scaling_workloads()
    reports = [simulate_workload(w, AnalyticalCostModel(w))[0] for w in ws]
    return Source("megatron_2021_weak_scaling", tuple(ws), measured, np.zeros(len(ws), dtype=bool),
                  np.array([r.iteration_time_s for r in reports]),
                  tuple(leaf_regime(w, r.provenance, host_fraction(r)) for w, r in zip(ws, reports)),
                  labels=tuple(str(i + 1) for i in range(len(ws))))


def published_sources() -> List[Source]:
    """One source per ``source_key`` of the shipped published runs (vtrain/data/published_runs), each row read
    as ``task=validate validate.data=published_runs`` reads it (:func:`vtrain.validation.published.pasted_row`,
    the defaults of the stack it names, on its own GPU's platform); none where that set is not shipped."""
    from vtrain.validation.csv_io import read_measurements
    from vtrain.validation.datasets import SHIPPED, resolve_dataset

    try:
        from vtrain.validation.published import SOURCE_COLUMN, pasted_row
    except ImportError:
        return []
    if "published_runs" not in SHIPPED:
        return []
    rows = read_measurements(resolve_dataset("published_runs"))
    cfg = cluster_cfg("h100x1024")  # only for rows that name no GPU platform (as task=validate's README command)
    keys = list(dict.fromkeys(r.get(SOURCE_COLUMN) or "unnamed" for r in rows))
    return [rows_source(f"published:{key}", [r for r in rows if (r.get(SOURCE_COLUMN) or "unnamed") == key], cfg,
                        None, None, prepare=lambda r: pasted_row(r)[0]) for key in keys]


BUILDERS: Dict[str, Callable[[], Source]] = {
    "a100_single_node": lambda: shipped_source("a100_single_node"),
    "megatron_2021_weak_scaling": weak_scaling_source,
    "torchtitan": lambda: shipped_source("torchtitan"),
    "megatron_moe_qwen3_h100": lambda: shipped_source("megatron_moe_qwen3_h100"),
    "megatron_moe_qwen3_blackwell": lambda: shipped_source("megatron_moe_qwen3_blackwell"),
}


def all_sources(names: Optional[Sequence[str]] = None, published: bool = True) -> List[Source]:
    """Every source (``names``: the shipped ones to load, default all), then the published runs' sources."""
    out = [BUILDERS[n]() for n in (names if names is not None else BUILDERS)]
    return out + (published_sources() if published else [])
