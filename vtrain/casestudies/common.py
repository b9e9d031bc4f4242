"""What the three case studies share: typed study parameters, plan enumeration over one Workload,
the result value and its CSV/JSON files. Pure except :func:`write_outputs`."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Type, TypeVar

from omegaconf import DictConfig, OmegaConf

from vtrain.config.build import model_spec
from vtrain.config.compose import CONF_DIR, group_options
from vtrain.config.validate import check_plan
from vtrain.cost.base import CostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.sim.simulator import simulate_workload
from vtrain.workload.enums import Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

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


def divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def load_model(name: str) -> ModelSpec:
    """A ``model/<name>.yaml`` config as a checked ModelSpec."""
    from vtrain.config.schema import ModelConfig

    path = CONF_DIR / "model" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"model={name} is unknown; one of: {', '.join(group_options('model'))}")
    node = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(path))
    return model_spec(node)


def with_plan(w: Workload, **changes: Any) -> Workload:
    return dataclasses.replace(w, plan=dataclasses.replace(w.plan, **changes))


def valid_plan(w: Workload) -> bool:
    try:
        check_plan(w.model, w.plan, w.cluster)
    except ConfigError:
        return False
    return True


def simulate(w: Workload, cost: CostModel) -> Optional[Report]:
    """The Report of a valid plan, None for a plan that breaks a divisibility/size rule."""
    if not valid_plan(w):
        return None
    report, _ = simulate_workload(w, cost)
    return report


@dataclass(frozen=True)
class PlanSpace:
    """A small plan space for a fixed GPU count: tp (within a node unless allowed), pp dividing the
    layers, dp = gpus / (tp·pp) dividing the batch, micro-batch sizes, recompute modes."""

    tp: Sequence[int] = (1, 2, 4, 8)
    max_pp: int = 16
    micro_batch_sizes: Sequence[int] = (1, 2)
    recompute: Sequence[str] = ("selective", "full")

    def plans(self, w: Workload, gpus: int) -> Iterator[Workload]:
        layers = w.model.num_layers
        gbs = w.plan.global_batch_size
        for tp in self.tp:
            if tp > w.cluster.gpus_per_node or gpus % tp:
                continue
            for pp in divisors(layers):
                if pp > self.max_pp or gpus % (tp * pp):
                    continue
                dp = gpus // (tp * pp)
                for mbs in self.micro_batch_sizes:
                    if gbs % (dp * mbs):
                        continue
                    for rc in self.recompute:
                        cand = with_plan(w, tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, recompute=Recompute(rc),
                                         sequence_parallel=w.plan.sequence_parallel and tp > 1)
                        if valid_plan(cand):
                            yield cand


def best_plan(w: Workload, cost: CostModel, gpus: int, space: PlanSpace,
              key: Callable[[Report], float] = lambda r: r.iteration_time_s) -> Optional[Report]:
    """The fitting plan of ``space`` on exactly ``gpus`` GPUs with the smallest ``key``; None if none fits.
    Recompute modes are tried cheapest first and a costlier one is skipped once a cheaper one fits."""
    best: Optional[Report] = None
    fitted: set = set()
    for cand in space.plans(w, gpus):
        p = cand.plan
        shape = (p.tp, p.pp, p.dp, p.micro_batch_size)
        if shape in fitted:
            continue  # a cheaper recompute mode of this shape already fits: more recompute only costs time
        report, _ = simulate_workload(cand, cost)
        if not report.fits:
            continue
        fitted.add(shape)
        if best is None or key(report) < key(best):
            best = report
    return best


def plan_str(plan: Any) -> str:
    if isinstance(plan, ParallelPlan):
        plan = plan.as_dict()
    s = f"t{plan['tp']}·p{plan['pp']}·d{plan['dp']} mb{plan['micro_batch_size']}"
    return s + ("" if plan.get("recompute", "none") == "none" else f" rc={plan['recompute']}")


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


def write_csv(path: Path, rows: Sequence[Dict[str, Any]]) -> None:
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in keys})


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def write_outputs(result: StudyResult, out_dir: Path, plot: Callable[[StudyResult, Path], None]) -> List[Path]:
    """Every table as CSV, the summary as JSON and the plot as PNG in ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, rows in result.tables.items():
        p = out_dir / f"{stem}.csv"
        write_csv(p, rows)
        paths.append(p)
    s = out_dir / "summary.json"
    s.write_text(json.dumps(result.summary, indent=2, default=str))
    paths.append(s)
    png = out_dir / f"{result.name}.png"
    plot(result, png)
    paths.append(png)
    return paths


def require_keys(cfg: DictConfig, *keys: str) -> None:
    for k in keys:
        if OmegaConf.is_missing(cfg, k) or cfg.get(k) is None:
            raise ConfigError(f"{k} is not set")


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
