"""task=validate: simulate measured runs, print per-row errors and the summary line, write
validation.csv and a predicted-vs-measured scatter plot. Reports; does not judge (exit code 0)."""
from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, List, Optional, Sequence

from omegaconf import DictConfig

from vtrain.cli import sweep
from vtrain.cli.logs import say
from vtrain.config.compose import require_group
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import REQUIRED, read_measurements
from vtrain.validation.datasets import SHIPPED_STACK, resolve_dataset, shipped_defaults
from vtrain.validation.metrics import ErrorSummary
from vtrain.validation.published import source_lines, summary_by_source
from vtrain.validation.ranking import margin_refusals, ranking_of_results
from vtrain.validation.run import (
    RULED_OUT_MEMORY_FACTOR,
    RowResult,
    coverage_pct,
    memory_summary_of,
    summary_of,
    validate_rows,
)
from vtrain.workload.fields import Domain, check_value

RESULT_COLUMNS = ("row", "measured_ms", "predicted_ms", "error_pct", "measured_quantity", "ape_pct", "fits",
                  "predicted_peak_memory_gib", "memory_error_pct", "skipped_reason", "predicted_lo_ms",
                  "predicted_hi_ms", "covered80", "interval_regime", "simulated_stack", "simulated_recompute",
                  "simulated_micro_batch", "ruled_out_recompute_peak_gib", "validation_notes")


def write_csv(results: Sequence[RowResult], path: Path) -> None:
    """Every input column (unknown ones echoed: a file may carry its own ids), then the results: the signed time
    error (predicted - measured) / measured, the absolute error of the measured quantity that MAPE averages (a
    rate's is the time's inverse), the predicted peak memory beside the measured ``peak_memory_gib``."""
    keys: List[str] = list(REQUIRED)
    extra = sorted({k for r in results for k in r.row.values} - set(REQUIRED))
    # an input column named like a result column is echoed as <name>_input (one header, one meaning)
    echoed = [f"{k}_input" if k in RESULT_COLUMNS else k for k in [*keys, *extra]]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row", *echoed, *RESULT_COLUMNS[1:]])
        for r in results:
            err = "" if r.predicted_ms is None else f"{(r.predicted_ms - r.measured_ms) / r.measured_ms * 100:.3f}"
            pred = "" if r.predicted_ms is None else f"{r.predicted_ms:.3f}"
            values = [r.row.values.get(k, "") for k in [*keys, *extra]]
            mem = "" if r.peak_memory_gib is None else f"{r.peak_memory_gib:.2f}"
            pm, mm = r.peak_memory_gib, r.measured_peak_memory_gib
            mem_err = "" if pm is None or not mm else f"{(pm - mm) / mm * 100:.2f}"
            measured = "" if r.predicted_ms is None else f"{r.measured_ms:.3f}"
            lo = "" if r.predicted_lo_ms is None else f"{r.predicted_lo_ms:.3f}"
            hi = "" if r.predicted_hi_ms is None else f"{r.predicted_hi_ms:.3f}"
            ape = "" if r.ape_pct is None else f"{r.ape_pct:.3f}"
            fits = "" if r.fits is None else r.fits
            covered = "" if r.covered is None else r.covered
            w.writerow([r.row.index, *values, measured, pred, err, r.quantity, ape, fits, mem, mem_err,
                        r.skipped_reason or "", lo, hi, covered, r.interval_regime, r.stack, r.recompute,
                        r.micro_batch,
                        "" if r.ruled_out_recompute_peak_gib is None else f"{r.ruled_out_recompute_peak_gib:.2f}",
                        r.notes])


def write_summary(results: Sequence[RowResult], pooled: ErrorSummary, path: Path) -> None:
    """The run's summary: the pooled error figures and, for a file with a ``source_key`` column, each source's
    (MAPE, median and max APE, share within 10%, rows simulated and skipped); also the sweep summary's metrics."""
    by_source = {key: asdict(s) for key, s in summary_by_source(results).items()}
    cov = coverage_pct(results)
    doc = {"pooled": asdict(pooled), "coverage80_pct": cov, "by_source": by_source,
           "ranking": ranking_of_results(results).as_dict()}  # order agreement and Kendall's tau-b per group
    path.write_text(json.dumps(_finite(doc), indent=2))
    sweep.note(mape_pct=pooled.mape_pct, within_10_pct=pooled.within_10_pct, rows=pooled.n, skipped=pooled.skipped)


def _finite(value: Any) -> Any:
    """``value`` with every NaN as None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and value != value:
        return None
    return value


def scatter_plot(results: Sequence[RowResult], path: Path, title: str) -> None:
    from vtrain.io.figure import log_scale, new_figure, wrapped

    pairs = [(r.measured_ms, r.predicted_ms) for r in results if r.predicted_ms is not None]
    meas = [m for m, _ in pairs]
    pred = [p for _, p in pairs]
    fig = new_figure(figsize=(5.5, 5.5))
    ax = fig.add_subplot()
    ax.scatter(meas, pred, s=6, alpha=0.5)
    lo, hi = min(meas + pred), max(meas + pred)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="y = x")
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.6, label="±10%")
    ax.plot([lo, hi], [lo * 0.9, hi * 0.9], "k:", lw=0.6)
    log_scale(ax, "x")
    log_scale(ax, "y")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted iteration time (ms)")
    ax.set_title(wrapped(title, 70), fontsize=7)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def coverage_line(results: Sequence[RowResult]) -> str:
    """``coverage80: x%``: the share of rows inside the Report's 80% interval, and the classes it rests on."""
    cov = coverage_pct(results)
    if cov is None:
        return "coverage80: n/a"
    regimes = sorted({r.interval_regime for r in results if r.covered is not None})
    return f"coverage80: {cov:.1f}% ({', '.join(regimes)})"


def _chosen_stack() -> Optional[str]:
    """The ``stack=...`` of the command line, if one was given (the config's default stack is not a choice)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    for o in HydraConfig.get().overrides.task:
        key, _, value = str(o).lstrip("+").partition("=")
        if key == "stack":
            return value
    return None


SHOW_ROWS = Domain(lo=0, hi=1e9, integer=True)  # the worst rows printed (0: none)


def run(cfg: DictConfig, out_dir: Path) -> int:
    require_group(cfg, "cluster")
    check_value("validate.show_rows", cfg.validate.show_rows, SHOW_ROWS)
    if str(cfg.cost.model) == "profile":  # rows run many shapes and GPUs no one profile holds
        raise ConfigError("cost.model=profile is not supported by task=validate: it prices every row with the "
                          "analytical model (cost.model=auto or analytical)")
    if not cfg.validate.data:
        raise ConfigError("validate.data is not set: give a CSV path or a shipped dataset name "
                          "(a100_single_node)")
    path = resolve_dataset(str(cfg.validate.data))
    rows = read_measurements(path)
    # rows without a stack column: validate.stack, the shipped dataset's, a stack= given on the command line,
    # else the stack of each row's era (vtrain.validation.rows.era_defaults)
    stack = cfg.validate.stack or SHIPPED_STACK.get(str(cfg.validate.data)) or _chosen_stack()
    results = validate_rows(rows, cfg, shipped_defaults(str(cfg.validate.data)), stack=stack)
    summary = summary_of(results)
    show = int(cfg.validate.show_rows)
    ok = [r for r in results if r.predicted_ms is not None]
    if not ok:  # a summary of nothing (MAPE n/a, n=0) is no result a script could tell from success
        why = next((r.skipped_reason for r in results if r.skipped_reason), "")
        raise ConfigError(f"validate.data={cfg.validate.data}: no row can be simulated ({len(results)} skipped; "
                          f"{why})")
    worst = sorted(ok, key=lambda r: -(r.ape_pct or 0.0))[:show]
    if show > 0 and ok:
        say(f"{'row':>5} {'gpus':>5} {'(tp,pp,dp)':>10} {'mb':>3} {'gbs':>5} {'hidden':>6} {'layers':>6} "
            f"{'measured ms':>12} {'predicted ms':>13} {'time err':>8} {'APE':>6}   ({len(worst)} worst rows; "
            "APE of the measured quantity, as MAPE: a rate's error is the time's inverse)")
        for r in worst:
            v = r.row.values
            shape = r.plan_shape
            say(f"{r.row.index:>5} {v.get('num_gpus', ''):>5} {shape:>10} "
                  f"{r.micro_batch or v.get('micro_batch') or v.get('local_batch', ''):>3} "
                  f"{v.get('global_batch') or v.get('global_batch_tokens', ''):>5} "
                  f"{v.get('hidden_size', v.get('model', '')):>6} "
                  f"{v.get('num_layers', ''):>6} "
                  f"{r.measured_ms:>12.1f} {r.predicted_ms:>13.1f} "
                  f"{(r.predicted_ms - r.measured_ms) / r.measured_ms * 100:>+7.1f}% "  # type: ignore[operator]
                  f"{r.ape_pct or 0.0:>5.1f}%")
    skipped = [r for r in results if r.predicted_ms is None]
    for r in skipped[:10]:
        say(f"skipped {r.skipped_reason}")
    ruled = [r for r in ok if r.ruled_out_recompute_peak_gib is not None]
    if ruled:  # a mode the memory model rules out by far: the lightest heavier mode that fits was run
        first = ruled[0]
        said = first.row.get("recompute") or "its defaults'"
        say(f"recompute ruled out: {len(ruled)} of {len(ok)} simulated rows (row {first.row.index} first: "
            f"recompute={said} needs {first.ruled_out_recompute_peak_gib:.0f} GiB, more than "
            f"{RULED_OUT_MEMORY_FACTOR:g}x its GPU's memory) ran with the lightest heavier mode that fits "
            f"({first.recompute}; validation.csv: simulated_recompute)")
    oom = [r for r in ok if r.fits is False]
    if oom:  # a run that ran fitted: each of these is an error of the memory model (or of the row's plan)
        say(f"predicted out of memory: {len(oom)} of {len(ok)} simulated rows (row {oom[0].row.index} first), "
            "though each ran: their predicted peak exceeds the GPU's memory")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(results, out_dir / "validation.csv")
    if ok:
        scatter_plot(results, out_dir / "validation.png",
                     f"{Path(path).name} on {cfg.cluster.name}\n{summary.line()}")
    for line in source_lines(results):  # a compiled table's sources (a source_key column), then all pooled
        say(f"source {line}")
    say(f"{summary.line()} | {coverage_line(results)}")
    ranking = ranking_of_results(results)  # the order of plans of one job, beside the error (vtrain.validation.ranking)
    for text in [ranking.line(), *ranking.group_lines(), margin_refusals(results)] if ok else []:
        if text:
            say(text)
    write_summary(results, summary, out_dir / "validation_summary.json")
    mem = memory_summary_of(results)
    if mem is not None:
        say(f"peak memory: {mem.line()}")
    say(f"wrote {out_dir / 'validation_summary.json'}")
    say(f"wrote {out_dir / 'validation.csv'}" + (f" and {out_dir / 'validation.png'}" if ok else ""))
    return 0
