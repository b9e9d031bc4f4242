"""Error metrics of predicted vs measured times (absolute percentage error, APE)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np


@dataclass(frozen=True)
class ErrorSummary:
    mape_pct: float
    median_ape_pct: float
    max_ape_pct: float
    within_10_pct: float
    n: int
    skipped: int

    def line(self) -> str:
        if self.n == 0:
            return f"MAPE: n/a (no row could be simulated) | n=0 | skipped={self.skipped}"
        return (f"MAPE: {self.mape_pct:.2f}% | median APE: {self.median_ape_pct:.2f}% | max APE: "
                f"{self.max_ape_pct:.1f}% | within 10%: {self.within_10_pct:.1f}% | n={self.n} | "
                f"skipped={self.skipped}")


def ape_pct(predicted: Sequence[float], measured: Sequence[float]) -> np.ndarray:
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return np.abs(p - m) / m * 100.0


def summarise(predicted: Sequence[float], measured: Sequence[float], skipped: int = 0) -> ErrorSummary:
    return summarise_ape(ape_pct(predicted, measured), skipped)


def summarise_ape(errors_pct: Union[Sequence[float], np.ndarray], skipped: int = 0) -> ErrorSummary:
    ape = np.asarray(errors_pct, dtype=float)
    if ape.size == 0:
        return ErrorSummary(float("nan"), float("nan"), float("nan"), float("nan"), 0, skipped)
    return ErrorSummary(float(ape.mean()), float(np.median(ape)), float(ape.max()),
                        float((ape <= 10.0).mean() * 100.0), int(ape.size), skipped)
