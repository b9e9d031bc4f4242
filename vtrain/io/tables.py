"""The one CSV writer of vtrain's result tables (search trials and fronts, case-study tables, sweep summaries).

Columns: the given ones (keys a row lacks are left empty, extra keys ignored), else every key of the rows
in first-seen order. Floats are written in full (``float_digits=None``) or to that many significant
digits (a non-finite one then as an empty cell); booleans as true/false; None as an empty cell.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence


def columns_of(rows: Sequence[Dict[str, Any]]) -> List[str]:
    keys: List[str] = []
    seen = set()
    for row in rows:
        for k in row:
            if k not in seen:
                seen.add(k)
                keys.append(k)
    return keys


def cell(value: Any, float_digits: Optional[int] = None) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and float_digits is not None:
        return f"{value:.{float_digits}g}" if math.isfinite(value) else ""
    return value


def write_csv(path: Path, rows: Sequence[Dict[str, Any]], columns: Optional[Sequence[str]] = None,
              float_digits: Optional[int] = None) -> Path:
    cols = list(columns) if columns is not None else columns_of(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for row in rows:
            w.writerow(_cells(row, cols, float_digits))
    return path


def _cells(row: Dict[str, Any], cols: Sequence[str], float_digits: Optional[int]) -> List[Any]:
    if float_digits is not None:
        return [cell(row.get(c), float_digits) for c in cols]
    # cell() inlined (bool is final: its class test is isinstance's): a search's trials.csv has ~1.5M cells
    return ["" if v is None else ("true" if v else "false") if v.__class__ is bool else v for v in map(row.get, cols)]
