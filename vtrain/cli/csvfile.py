"""The one CSV writer of the CLI and the case studies: a list of dict rows, columns in order of first
appearance, floats to 6 significant digits, None as an empty cell. (When the search package ships its
shared CSV writer, this function delegates to it.)"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Dict, List, Sequence


def write_csv(path: Path, rows: Sequence[Dict[str, Any]]) -> Path:
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in keys})
    return path


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else ""
    return v
