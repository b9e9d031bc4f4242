"""Files a search leaves in its run directory (written before anything goes to MLflow):

trials.csv, pareto.csv, pareto.png (matplotlib, Agg), pareto.html (inline SVG, no JavaScript: small,
renders offline and in MLflow's artifact preview; :mod:`vtrain.search.svg_view`), best_time.yaml /
best_cost.yaml (overrides for ``task=simulate``), and best_time/ best_cost/ with report.json and
timeline.json of those plans. With constraints, "best" means best within them.

``best_*.yaml`` holds one ``key=value`` override per line. YAML reads those lines as one folded
string and the shell splits them into arguments, so both work::

    python -m vtrain task=simulate +model=gpt175b +cluster=a100x1024 $(cat <run dir>/best_time.yaml)
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Dict, List, Sequence

from vtrain.io.labels import plan_label
from vtrain.io.tables import write_csv
from vtrain.search.forked import Forked
from vtrain.search.plans import APPLIED_FIELDS, FIELD_GROUP, SEARCHED_FIELDS, canonical, plan_from_fields
from vtrain.search.records import SearchResult, TrialRecord

METRIC_COLUMNS = ("iteration_time_s", "time_to_train_s", "cost_usd", "mfu", "peak_memory_gib", "fits", "gpus_used")
DAY_S = 86400.0
LABELS = {"time_to_train_s": "time to train (days)", "cost_usd": "cost (million USD)",
          "iteration_time_s": "iteration time (s)", "mfu": "MFU", "gpus_used": "GPUs"}
SCALE = {"time_to_train_s": 1 / DAY_S, "cost_usd": 1e-6}


def plan_overrides(plan: Dict[str, Any]) -> List[str]:
    """``parallelism.<field>=<value>`` (``training.precision``) for every searched field the record holds
    (booleans as true/false)."""
    def fmt(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)

    return [f"{FIELD_GROUP[k]}.{k}={fmt(plan[k])}" for k in SEARCHED_FIELDS if k in plan]


def applied_overrides(result: SearchResult, rec: TrialRecord) -> List[str]:
    """The config's settings that the search applies only where they suit (``APPLIED_FIELDS``: e.g.
    tp_comm_overlap at tp>1) as this plan ran them, where that differs from the config (after the config's
    own overrides on a command line, so that they win)."""
    ctx = result.context
    if ctx is None or not rec.plan:
        return []
    base = ctx.space.base
    plan = canonical(plan_from_fields(base, rec.plan), ctx.space.model)
    out = []
    for k in APPLIED_FIELDS:
        v = getattr(plan, k)
        if v != getattr(base, k):
            out.append(f"{FIELD_GROUP.get(k, 'parallelism')}.{k}={str(v).lower() if isinstance(v, bool) else v}")
    return out


def simulate_prefix(result: SearchResult) -> str:
    """``python -m vtrain [--config-dir=...] task=simulate <the search's overrides>``: Hydra reads its flags
    before the overrides, never after them."""
    flags = [shlex.quote(o) for o in result.base_overrides if o.startswith("-")]  # a shell command: quoted
    rest = [shlex.quote(o) for o in result.base_overrides if not o.startswith("-")]
    return " ".join(["python -m vtrain", *flags, "task=simulate", *rest])


def simulate_command(result: SearchResult, rec: TrialRecord) -> str:
    return " ".join([simulate_prefix(result), *plan_overrides(rec.plan or {}), *applied_overrides(result, rec)])


TRIAL_COLUMNS = ("trial", "state", "pareto", "within_constraints", "duplicate_of", "reason", *SEARCHED_FIELDS,
                 *METRIC_COLUMNS, "days_to_train", "cost_musd", "mfu_pct")


def row(rec: TrialRecord, on_front: bool) -> Dict[str, Any]:
    """One trial as a flat row (CSV, the MLflow trials table): plan fields, SI and human metrics."""
    out: Dict[str, Any] = {"trial": rec.number, "state": rec.state, "pareto": on_front,
                           "within_constraints": rec.satisfies, "duplicate_of": rec.duplicate_of,
                           "reason": rec.reason or ""}
    out.update(rec.plan or {})
    out.update(rec.metrics)
    out.update(human_metrics(rec.metrics))
    return out


def _significant(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant digits (readable in MLflow, whatever its magnitude)."""
    return float(f"{x:.{digits}g}")


def human_metrics(m: Dict[str, float]) -> Dict[str, float]:
    """Days, million USD and percent beside the SI values, to 4 significant digits."""
    out = {}
    if "time_to_train_s" in m:
        out["days_to_train"] = _significant(m["time_to_train_s"] / DAY_S)
    if "cost_usd" in m:
        out["cost_musd"] = _significant(m["cost_usd"] / 1e6)
    if "mfu" in m:
        out["mfu_pct"] = _significant(100 * m["mfu"])
    return out


def write_trials_csv(result: SearchResult, path: Path) -> None:
    front = {r.number for r in result.front}
    write_csv(path, [row(r, r.number in front) for r in result.records], TRIAL_COLUMNS)


def write_pareto_csv(result: SearchResult, path: Path) -> None:
    write_csv(path, [row(r, True) for r in result.front],
              ["trial", *SEARCHED_FIELDS, *METRIC_COLUMNS, "days_to_train", "cost_musd", "mfu_pct"])


def write_best_yaml(result: SearchResult, out_dir: Path) -> Dict[str, Path]:
    paths = {}
    for name, rec in result.best.items():
        path = out_dir / f"best_{name}.yaml"
        path.write_text("\n".join(plan_overrides(rec.plan or {}) + applied_overrides(result, rec)) + "\n")
        paths[name] = path
    return paths


def _xy(result: SearchResult, recs: Sequence[TrialRecord]) -> tuple:
    ox, oy = result.objectives[0], result.objectives[1] if len(result.objectives) > 1 else "cost_usd"
    fx = lambda r: r.metrics.get(ox, float("nan")) * SCALE.get(ox, 1.0)  # noqa: E731
    fy = lambda r: r.metrics.get(oy, float("nan")) * SCALE.get(oy, 1.0)  # noqa: E731
    return [fx(r) for r in recs], [fy(r) for r in recs], LABELS.get(ox, ox), LABELS.get(oy, oy)


def plot_png(result: SearchResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vtrain.io.figure import log_scale, plain_text

    plain_text()
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    x, y, lx, ly = _xy(result, result.feasible)
    ax.scatter(x, y, s=8, c="0.7", label=f"feasible plans ({len(x)})")
    out = [r for r in result.feasible if not r.satisfies]
    if out:
        ox_, oy_, _, _ = _xy(result, out)
        ax.scatter(ox_, oy_, s=8, c="tab:orange", alpha=0.5, label=f"outside the constraints ({len(out)})")
    fx, fy, _, _ = _xy(result, result.front)
    ax.plot(fx, fy, "o-", c="tab:red", ms=5, label=f"Pareto front ({len(fx)})")
    for name, marker, style in (("time", "fastest", "*"), ("cost", "cheapest", "D")):
        rec = result.best.get(name)
        if rec is not None:  # marked points, described in the legend (labels on the plot overlap)
            bx, by, _, _ = _xy(result, [rec])
            ax.plot(bx, by, style, ms=11 if style == "*" else 7, mfc="none", mec="k", mew=1.2,
                    label=f"{marker}: {plan_label(rec.plan or {})}")
    if len(x) and max(x) > 5 * min(x):  # plans span orders of magnitude in time (fewer GPUs = slower)
        log_scale(ax, "x")
    ax.set_xlabel(lx)
    ax.set_ylabel(ly)
    extra = f"; {result.constraints.text()}" if result.constraints and result.constraints.active else ""
    ax.set_title(f"{result.model} on {result.cluster}: {result.sampler}, {len(result.records)} plans{extra}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def best_report_dirs(result: SearchResult, out_dir: Path, top_k: int) -> Dict[str, Path]:
    """Where :func:`write_best_reports` writes: ``best_<name>`` for the first ``top_k`` best plans."""
    if result.context is None or top_k <= 0:
        return {}
    return {name: out_dir / f"best_{name}" for name in list(result.best)[:top_k]}


def write_best_reports(result: SearchResult, out_dir: Path, top_k: int) -> Dict[str, Path]:
    """``best_<name>/report.json`` and ``timeline.json`` (Chrome trace) of the fastest and cheapest plans."""
    from vtrain.search.plans import plan_from_fields
    from vtrain.timeline import chrome_trace

    ctx = result.context
    dirs = best_report_dirs(result, out_dir, top_k)
    for name, d in dirs.items():
        assert ctx is not None
        rec = result.best[name]
        report, trace = ctx.evaluator.simulate(plan_from_fields(ctx.space.base, rec.plan or {}), keep_trace=True)
        d.mkdir(parents=True, exist_ok=True)
        (d / "report.json").write_text(json.dumps(report.to_dict(), indent=2, default=str))
        if trace is not None:
            (d / "timeline.json").write_text(json.dumps(chrome_trace(trace)))
    return dirs


def write_plots(result: SearchResult, out_dir: Path) -> None:
    """pareto.png and pareto.html."""
    from vtrain.search.svg_view import write_html

    plot_png(result, out_dir / "pareto.png")
    write_html(result, out_dir / "pareto.html")


def write_all(result: SearchResult, out_dir: Path, top_k: int = 2) -> List[Path]:
    """Every output file; with no feasible plan only trials.csv. Returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "trials.csv"]
    # the plots (matplotlib: half of this function's time) and the best plans' reports (a traced simulation
    # each) are written in two more processes meanwhile
    plots = Forked(write_plots, result, out_dir) if result.front else None
    reports = Forked(write_best_reports, result, out_dir, top_k) if result.front else None
    write_trials_csv(result, paths[0])
    if plots is None or reports is None:
        return paths
    write_pareto_csv(result, out_dir / "pareto.csv")
    best = list(write_best_yaml(result, out_dir).values()) + list(best_report_dirs(result, out_dir, top_k).values())
    plots.join()
    reports.join()
    return paths + [out_dir / "pareto.csv", out_dir / "pareto.png", out_dir / "pareto.html", *best]
