"""task=calibrate calibrate.scope=all: one calibration of every GPU's and stack's fitted constants on every
measured source the repository ships, judged leave-one-source-out, and the 80% intervals refitted on those
held-out residuals.

    python -m vtrain task=calibrate calibrate.scope=all                      # ~5 min on two cores
    python -m vtrain task=calibrate calibrate.scope=all calibrate.write=true # ... and write configs and intervals

Prints per source: rows, skipped, MAPE at the config values, in-sample MAPE (fitted on every source),
leave-one-source-out MAPE (fitted without it) and its share within 10%, the interval's held-out coverage,
the ranking of each job's plans (order agreement and Kendall's tau-b, held out and in-sample:
vtrain.calibration.ranking_cv); then the pooled figures and the constants. Writes summary.json, sources.csv
and predictions.csv into the run directory (and, with calibrate.write=true, the constants whose sources'
held-out error the fit lowers into their gpu/ and stack/ configs, and the interval table into
vtrain/data/intervals.json).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from omegaconf import DictConfig

from vtrain.calibration import block_scaled, intervals_fit, ranking_cv
from vtrain.calibration.loso import PARAMS, Fit, Param, SourceResult, loso, prior_value
from vtrain.calibration.sources import Source, all_sources
from vtrain.cli.logs import say
from vtrain.workload.fields import Domain, check_value

COMMAND = "python -m vtrain task=calibrate calibrate.scope=all"
MAX_EVALS = Domain(lo=10, hi=1e5, integer=True)  # Nelder-Mead evaluations of the surrogate per fit


def _figures(ape: np.ndarray) -> Dict[str, float]:
    return {"mape_pct": round(float(np.mean(ape)), 3), "within_10_pct": round(float(np.mean(ape <= 10.0) * 100), 1),
            "max_ape_pct": round(float(np.max(ape)), 2)} if ape.size else {}


def _rankings(sources: Sequence[Source], results: Sequence[SourceResult]) -> Tuple[List[Any], List[Any]]:
    """Each source's rows as ranked (workloads, measured, predicted): held out, in-sample."""
    held = [(s.workloads, s.measured_s, r.loso_s) for s, r in zip(sources, results)]
    ins = [(s.workloads, s.measured_s, r.in_sample_s if r.in_sample_s is not None else r.loso_s)
           for s, r in zip(sources, results)]
    return held, ins


def source_table(sources: Sequence[Source], results: Sequence[SourceResult],
                 coverage: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Print and return one line per source, then the pooled lines (MAPE, then the ranking: order agreement
    and Kendall's tau-b held out and in-sample, pairs measured > 5% apart / groups of one job)."""
    say(f"  {'source':<36} {'n':>5} {'skip':>4} {'config':>7} {'in-samp':>7} {'LOSO':>7} {'LOSO<=10%':>9} "
        f"{'cover80':>7} {ranking_cv.CONSOLE_HEADER}")
    held, ins = _rankings(sources, results)
    rows: List[Dict[str, Any]] = []
    for s, r, h, i in zip(sources, results, held, ins):
        cov = coverage.get(f"source:{s.name}", {}).get("coverage_pct", float("nan"))
        rec = {"source": s.name, "n": r.n, "skipped": r.skipped, "fit_rows": len(s.fit_index),
               "config_mape_pct": round(float(r.shipped_ape.mean()), 3),
               "in_sample": _figures(r.in_sample_ape), "loso": _figures(r.loso_ape), "coverage80_pct": cov,
               "skip_reasons": list(s.skipped),
               "held_out_fit": {p.key: v for p, v in zip(PARAMS, r.fold.values) if v is not None},
               "ranking": ranking_cv.figures(ranking_cv.source_ranking(*h), ranking_cv.source_ranking(*i))}
        rows.append(rec)
        say(f"  {s.name:<36} {r.n:>5} {r.skipped:>4} {rec['config_mape_pct']:>6.2f}% "
            f"{rec['in_sample']['mape_pct']:>6.2f}% {rec['loso']['mape_pct']:>6.2f}% "
            f"{rec['loso']['within_10_pct']:>8.1f}% {cov:>6.1f}% {ranking_cv.console(rec['ranking'])}")
    groups = {"pooled (every row)": [True] * len(results),
              "pooled published runs": [r.name.startswith("published:") for r in results]}
    for label, pick in groups.items():
        chosen = [r for r, p in zip(results, pick) if p]
        if not chosen:
            continue
        loso_ape = np.concatenate([r.loso_ape for r in chosen])
        in_ape = np.concatenate([r.in_sample_ape for r in chosen])
        cfg_ape = np.concatenate([r.shipped_ape for r in chosen])
        rec = {"source": label, "n": int(loso_ape.size), "config_mape_pct": round(float(cfg_ape.mean()), 3),
               "in_sample": _figures(in_ape), "loso": _figures(loso_ape),
               "source_mean_loso_mape_pct": round(float(np.mean([r.loso_ape.mean() for r in chosen])), 3),
               "ranking": ranking_cv.figures(ranking_cv.pooled([h for h, p in zip(held, pick) if p]),
                                             ranking_cv.pooled([i for i, p in zip(ins, pick) if p]))}
        rows.append(rec)
        say(f"  {label:<36} {rec['n']:>5} {'':>4} {rec['config_mape_pct']:>6.2f}% "
            f"{rec['in_sample']['mape_pct']:>6.2f}% {rec['loso']['mape_pct']:>6.2f}% "
            f"{rec['loso']['within_10_pct']:>8.1f}% {'':>7} {ranking_cv.console(rec['ranking'])}  (mean of "
            f"sources' LOSO MAPE {rec['source_mean_loso_mape_pct']:.2f}%)")
    say(f"  interval coverage over every held-out row: {coverage['all']['coverage_pct']:.1f}% "
        f"(n={coverage['all']['n']})")
    return rows


def improves(p: Param, names: Sequence[str], results: Sequence[SourceResult]) -> bool:
    """Whether the held-out error of the sources ``p`` applies to is below their error at the config values."""
    mine = [r for r in results if r.name in names]
    return bool(mine) and float(np.mean([r.loso_ape.mean() for r in mine])) < \
        float(np.mean([r.shipped_ape.mean() for r in mine]))


def constant_table(sources: Sequence[Source], full: Fit, results: Sequence[SourceResult]) -> List[Dict[str, Any]]:
    """Print and return per constant: config value, fitted value, the sources it was fitted on, the range over
    the leave-one-source-out folds, and whether to write it (below)."""
    say(f"  {'constant':<48} {'config':>9} {'fitted':>9} {'over folds':>21} {'sources':>7}  write")
    out = []
    for i, (p, names) in enumerate(zip(PARAMS, full.informed_by)):
        folds = [float(f) for f in (r.fold.values[i] for r in results) if f is not None]
        v = full.values[i]
        # written where it lowers its sources' held-out error and every fold moved it off the config value (a
        # config value inside the folds' range is one the data do not move)
        better = v is not None and improves(p, names, results) and bool(folds) and \
            not min(folds) <= prior_value(p, sources) <= max(folds)
        spread = f"{min(folds):.4g} .. {max(folds):.4g}" if folds else "-"
        say(f"  {p.key:<48} {prior_value(p, sources):>9.4g} {'-' if v is None else f'{v:.4g}':>9} {spread:>21} "
            f"{len(names):>7}  {'yes' if better else 'no'}")
        if names and (v is not None or p.plan_flag):
            say(f"    fitted on the rows of: {', '.join(names)}" if v is not None else
                f"    informed by one source ({names[0]}): the config value kept")
        out.append({"constant": p.key, "field": p.field, "members": list(p.members),
                    "config": prior_value(p, sources), "fitted": v, "fold_min": min(folds) if folds else None,
                    "fold_max": max(folds) if folds else None, "sources": names, "write": better})
    return out


def write_predictions(path: Path, sources: Sequence[Source], results: Sequence[SourceResult],
                      checked: Sequence[Any]) -> None:
    """Every row: measured, at the config values, held out, and its held-out 80% interval (lo, hi factors of
    the held-out prediction, from the interval table refitted without its source: bench/fit_intervals.py plots
    them); then its in-sample prediction, the job group it is ranked in (vtrain.calibration.ranking_cv) and its
    plan's id (the first 12 hex digits of the SHA-1 of vtrain.validation.ranking.ranking_plan: one id, one plan). The
    ranked times carry 10 significant digits, so that the ranking recomputed from the file counts the same pairs
    (a pair 5.0000% apart at 6 digits may be 4.9999% apart at full precision)."""
    import hashlib

    from vtrain.validation.ranking import ranking_group, ranking_plan

    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["source", "row", "gpu", "stack", "measured_s", "measured_as_rate", "config_s", "held_out_s",
                      "held_out_ape_pct", "interval_class", "interval_lo_factor", "interval_hi_factor",
                      "in_sample_s", "job_group", "plan_id"])
        k = 0
        for s, r in zip(sources, results):
            for j, w in enumerate(s.workloads):
                _, lo, hi, _ = checked[k]
                k += 1
                out.writerow([s.name, s.labels[j] if s.labels else j + 1, w.cluster.gpu.name, w.stack.name,
                              f"{s.measured_s[j]:.10g}", int(s.rate[j]), f"{s.shipped_s[j]:.6g}",
                              f"{r.loso_s[j]:.10g}", f"{r.loso_ape[j]:.3f}", s.leaves[j], f"{lo:.4f}", f"{hi:.4f}",
                              "" if r.in_sample_s is None else f"{r.in_sample_s[j]:.10g}", ranking_group(w),
                              hashlib.sha1(ranking_plan(w).encode()).hexdigest()[:12]])


def write_configs(constants: Sequence[Dict[str, Any]]) -> List[str]:
    """Each constant whose fit lowers its sources' held-out error, into the gpu/ or stack/ configs of its
    members that hold their own value (a config that inherits it follows its parent)."""
    from vtrain.calibration.loso import PARAMS as params
    from vtrain.calibration.yaml_write import update_yaml
    from vtrain.config.compose import CONF_DIR

    written = []
    by_key = {p.key: p for p in params}
    for c in constants:
        if not c["write"]:
            continue
        p = by_key[c["constant"]]
        prov = (f"fitted: one calibration on {len(c['sources'])} sources ({', '.join(c['sources'])}), leave-one-"
                f"source-out range {c['fold_min']:.4g} .. {c['fold_max']:.4g}; {COMMAND} calibrate.write=true")
        if p.on_tier:
            written += write_tier(p.field, float(f"{c['fitted']:.4g}"), prov)
            continue
        group = "gpu" if p.on_gpu else "stack"
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            text = path.read_text()
            if f"\n{p.field}:" not in f"\n{text}" or not _member(p, group, path.stem):
                continue
            update_yaml(path, {p.field: float(f"{c['fitted']:.4g}")}, {p.field: prov})
            written.append(f"{group}/{path.name}")
    return written


def write_tier(field: str, value: float, prov: str) -> List[str]:
    """A scale-out tier's fitted field into each cluster/ config that sets it inline (``inter_node: {...}``), the
    provenance as the comment line above it."""
    import re

    from vtrain.config.compose import CONF_DIR

    written = []
    for path in sorted((CONF_DIR / "cluster").glob("*.yaml")):
        lines = path.read_text().splitlines(keepends=True)
        at = [i for i, ln in enumerate(lines) if ln.startswith("inter_node:") and f"{field}:" in ln]
        if not at:
            continue
        i = at[0]
        lines[i] = re.sub(rf"({field}:\s*)[0-9.eE+-]+", rf"\g<1>{value:g}", lines[i])
        note = f"# {field}: {prov}\n"
        if i > 0 and lines[i - 1].startswith(f"# {field}: fitted"):
            lines[i - 1] = note
        else:
            lines.insert(i, note)
        path.write_text("".join(lines))
        written.append(f"cluster/{path.name}")
    return written


def _member(p: Param, group: str, name: str) -> bool:
    """Whether the config ``group/name`` is one of ``p``'s members (a GPU by its architecture, inherited or not)."""
    if group == "stack":
        return name in p.members
    from vtrain.config.build import gpu_spec
    from vtrain.config.compose import load_gpu_config

    return str(gpu_spec(load_gpu_config(name)).architecture) in p.members


def run_all(cfg: DictConfig, out_dir: Path) -> int:
    max_evals = cfg.extra.get("max_evals", 400)
    check_value("extra.max_evals", max_evals, MAX_EVALS)
    say("reading every source as task=validate reads it ...")
    sources = [s for s in all_sources() if s.n > 0]
    say(f"{len(sources)} sources, {sum(s.n for s in sources)} rows ({sum(len(s.skipped) for s in sources)} skipped); "
        f"fitting {len(PARAMS)} constants on each source's rows (every k-th of a large one: "
        f"{', '.join(f'{s.name} every {s.fit_every}' for s in sources if s.fit_every > 1)}), then once per source "
        "without it ...")
    full, results = loso(sources, PARAMS, int(max_evals), progress=lambda m: say(f"  {m}"))
    rows = intervals_fit.residuals(sources, {r.name: r.loso_s for r in results})
    checked = intervals_fit.nested(rows)
    coverage = intervals_fit.nested_coverage(checked)
    say("per source (MAPE of the measured quantity; config: the shipped constants; LOSO: fitted without the "
        "source; cover80: the source's rows inside the interval refitted without it):")
    table = source_table(sources, results, coverage)
    say("constants (fitted where >= 2 training sources inform them; else the config value is kept):")
    constants = constant_table(sources, full, results)
    say("block-scaled GEMM ratio (pairs of one job in two precisions, two sources; vtrain.calibration.block_scaled):")
    pairs = block_scaled.load_pairs()
    ratio = block_scaled.fit(block_scaled.fitted_pairs(pairs))
    for line in block_scaled.report(pairs, ratio, block_scaled.shipped_ratio()):
        say(f"  {line}")
    out_dir.mkdir(parents=True, exist_ok=True)
    intervals = intervals_fit.table_json(rows, coverage, COMMAND)
    summary = {"command": COMMAND, "sources": table, "constants": constants, "max_evals": int(max_evals),
               "fit_rows_note": "a source with fit_every k is fitted on every k-th row and reported on all"}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (out_dir / "intervals.json").write_text(json.dumps(intervals, indent=1) + "\n")
    with (out_dir / "sources.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["source", "n", "skipped", "config_mape_pct", "in_sample_mape_pct", "loso_mape_pct",
                      "loso_within_10_pct", "coverage80_pct", *ranking_cv.CSV_COLUMNS])
        for rec in table:
            out.writerow([rec["source"], rec["n"], rec.get("skipped", ""), rec["config_mape_pct"],
                          rec["in_sample"]["mape_pct"], rec["loso"]["mape_pct"], rec["loso"]["within_10_pct"],
                          rec.get("coverage80_pct", ""), *ranking_cv.csv_cells(rec.get("ranking"))])
    write_predictions(out_dir / "predictions.csv", sources, results, checked)
    if cfg.calibrate.write:
        from vtrain.validation.datasets import data_path

        written = write_configs(constants)
        say(block_scaled.write(pairs, ratio)[0])
        data_path("intervals.json").write_text(json.dumps(intervals, indent=1) + "\n")
        say(f"updated {', '.join(written) or 'no config (no fit lowered its sources held-out error)'} and "
            f"{data_path('intervals.json')}")
    say(f"wrote {out_dir / 'summary.json'}, sources.csv, predictions.csv and intervals.json")
    return 0
