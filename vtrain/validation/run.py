"""Simulate every measured row and collect predicted vs measured times."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.errors import ConfigError
from vtrain.sim.simulator import simulate_workload
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.metrics import ErrorSummary, summarise
from vtrain.validation.rows import RowDefaults, row_workload


@dataclass(frozen=True)
class RowResult:
    row: MeasuredRow
    measured_ms: float
    predicted_ms: Optional[float]
    skipped_reason: Optional[str] = None

    @property
    def ape_pct(self) -> Optional[float]:
        if self.predicted_ms is None:
            return None
        return abs(self.predicted_ms - self.measured_ms) / self.measured_ms * 100.0


def validate_rows(rows: Sequence[MeasuredRow], cfg: Any, defaults: RowDefaults = RowDefaults(),
                  stack: Optional[str] = None) -> List[RowResult]:
    """Simulate each row on ``cfg.cluster`` (``stack``: validate.stack, for rows without a stack column)."""
    from vtrain.config.compose import load_gpu_config, load_stack_config

    load_gpu = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    out: List[RowResult] = []
    for row in rows:
        try:
            measured = float(row.get("iteration_time_ms") or "nan")
        except ValueError:
            out.append(RowResult(row, float("nan"), None, f"iteration_time_ms={row.get('iteration_time_ms')} "
                                                          "is not a number"))
            continue
        try:
            w = row_workload(row, cfg.cluster, load_gpu, load_stack, defaults, stack)
            report, _ = simulate_workload(w, AnalyticalCostModel(w))
        except ConfigError as err:
            out.append(RowResult(row, measured, None, str(err)))
            continue
        out.append(RowResult(row, measured, report.iteration_time_s * 1e3))
    return out


def summary_of(results: Sequence[RowResult]) -> ErrorSummary:
    ok = [r for r in results if r.predicted_ms is not None]
    return summarise([r.predicted_ms for r in ok], [r.measured_ms for r in ok],  # type: ignore[misc]
                     skipped=len(results) - len(ok))
