"""The shipped published runs read and simulated as task=validate does, row by row, for tests and figures
that need each row's workload and measured time (:func:`published_rows`)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, List, Optional

from vtrain.config.compose import compose, load_gpu_config, load_stack_config
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import MeasuredRow, read_measurements
from vtrain.validation.datasets import resolve_dataset
from vtrain.validation.published import SOURCE_COLUMN, pasted_row
from vtrain.validation.run import check_measured_ms, measured_ms, simulate_row


@dataclass(frozen=True)
class PublishedRow:
    """One row of the shipped published runs, as task=validate simulates it: its source, the row as read (after
    :func:`pasted_row`), the workload simulated (micro-batch and recompute as the validator chose them) and the
    measured iteration time in seconds; ``skipped``: why it could not be simulated (then workload is None)."""

    source_key: str
    row: MeasuredRow
    workload: Optional[Any]
    measured_s: float
    skipped: Optional[str] = None


def published_rows(cluster: str = "h100x1024", name: str = "published_runs") -> List[PublishedRow]:
    """Every row of the shipped ``published_runs`` set (or another shipped or CSV ``name``), read and simulated
    as task=validate does (each row on its own GPU's platform; ``cluster`` only for rows that name none)."""
    cfg = compose([f"+cluster={cluster}"], require=False)
    load_gpu = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    out: List[PublishedRow] = []
    for raw in read_measurements(resolve_dataset(name)):
        source = raw.get(SOURCE_COLUMN) or ""
        try:
            row, _ = pasted_row(raw)
            w, _, _ = simulate_row(row, cfg, load_gpu, load_stack, None, None)
            ms = check_measured_ms(row, measured_ms(row, w)[0])
        except ConfigError as err:
            out.append(PublishedRow(source, raw, None, float("nan"), str(err)))
            continue
        out.append(PublishedRow(source, row, w, ms / 1e3))
    return out
