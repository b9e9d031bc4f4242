"""What the three case studies share: typed study parameters, the result value, its text tables and
its files (CSV tables, strict-JSON summary, PNG plot). Pure except :func:`write_outputs`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Sequence, Type, TypeVar

from omegaconf import OmegaConf

from vtrain.errors import ConfigError
from vtrain.io.jsonio import write_json
from vtrain.io.tables import write_csv

T = TypeVar("T")
GIB = 2**30
DAY_S = 86400.0


def parse_params(schema: Type[T], params: Any, where: str = "case_study.params") -> T:
    """``params`` (a DictConfig or dict) merged over the dataclass ``schema``: a wrong key or type is a
    one-line ConfigError naming the key."""
    raw = OmegaConf.to_container(params, resolve=True) if OmegaConf.is_config(params) else dict(params or {})
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), raw)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except Exception as exc:  # omegaconf ValidationError / ConfigKeyError and friends
        msg = str(exc).strip().splitlines()[0]
        raise ConfigError(f"{where}: {msg}") from None


def pct_saved(new: float, base: float) -> float:
    """Percent of ``base`` saved by ``new`` (positive: ``new`` is smaller)."""
    return 100.0 * (base - new) / base if base else math.nan


@dataclass(frozen=True)
class StudyResult:
    """One case study's outcome: tables (file stem -> rows), a JSON summary, MLflow params/metrics."""

    name: str
    title: str
    tables: Dict[str, List[Dict[str, Any]]]
    summary: Dict[str, Any]
    params: Dict[str, Any]
    metrics: Dict[str, float]
    text: str
    data: Any = field(default=None, compare=False)  # the study's own values, for the plot
    runs: List[Dict[str, Any]] = field(default_factory=list)  # MLflow child runs: {name, params, metrics}
    headline: str = ""  # the finding in one line (a multirun's sweep summary shows it per job)


def write_outputs(result: StudyResult, out_dir: Path, plot: Callable[[StudyResult, Path], None]) -> List[Path]:
    """Every table as CSV, the summary as JSON and the plot as PNG in ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, rows in result.tables.items():
        p = out_dir / f"{stem}.csv"
        write_csv(p, rows, float_digits=6)
        paths.append(p)
    paths.append(write_json(out_dir / "summary.json", result.summary))
    png = out_dir / f"{result.name}.png"
    plot(result, png)
    paths.append(png)
    return paths


def fmt_table(rows: Iterable[Dict[str, Any]], cols: Sequence[str]) -> str:
    """A plain fixed-width text table of ``cols``."""
    rows = list(rows)
    cells = [[str(c) for c in cols]] + [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if abs(v) < 10:
            return f"{v:.4f}"
        return f"{v:,.2f}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v)
