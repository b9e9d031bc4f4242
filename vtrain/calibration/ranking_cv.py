"""Cross-validated ranking accuracy of the calibration: does vtrain, with its constants fitted WITHOUT a source,
order that source's plans of one job as the measurements order them?

A source's rows are grouped by what a job fixes (model shape, GPU type and count, sequence length, global batch:
:func:`vtrain.validation.ranking.ranking_group`); each group is ranked with the source's held-out predictions
(leave-one-source-out) and, beside them, its in-sample ones (fitted on every source):
:func:`vtrain.validation.ranking.ranking_summary` gives pairwise order agreement over pairs measured more than
5% apart and Kendall's tau-b. A pooled figure groups the rows of several sources by job, as task=validate groups
a file's rows: the same job measured by two sources (two releases of one framework) is one group, each run
predicted by the constants fitted without its own source.

    python -m vtrain task=calibrate calibrate.scope=all   # prints them beside the MAPE; summary.json, sources.csv
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from vtrain.validation.ranking import RankingSummary, ranking_group, ranking_of_plans, ranking_plan

Seconds = Union[Sequence[float], np.ndarray]  # a source's times, one per row

# sources.csv's ranking columns, appended after its error columns (bench/readme_figures.py reads them by name)
CSV_COLUMNS = ("ranking_groups", "ranking_pairs", "loso_order_agreement_pct", "loso_kendall_tau_b",
               "in_sample_order_agreement_pct", "in_sample_kendall_tau_b")


def source_ranking(workloads: Sequence[Any], measured_s: Seconds, predicted_s: Seconds) -> RankingSummary:
    """One source's ranking figures: its rows grouped by job, each group's measured vs predicted seconds."""
    if not len(workloads) == len(measured_s) == len(predicted_s):
        raise ValueError(f"source_ranking: {len(workloads)} workloads, {len(measured_s)} measured, "
                         f"{len(predicted_s)} predicted")
    groups: Dict[str, List[Tuple[str, float, float]]] = {}
    for w, m, p in zip(workloads, measured_s, predicted_s):
        groups.setdefault(ranking_group(w), []).append((ranking_plan(w), float(m), float(p)))
    return ranking_of_plans(groups)  # one plan measured twice (two releases) ranks once


def pooled(parts: Sequence[Tuple[Sequence[Any], Seconds, Seconds]]) -> RankingSummary:
    """The ranking of several sources' rows together ((workloads, measured, predicted) per source), grouped by job
    across the sources."""
    workloads: List[Any] = []
    measured: List[float] = []
    predicted: List[float] = []
    for ws, m, p in parts:
        if not len(ws) == len(m) == len(p):
            raise ValueError(f"pooled: {len(ws)} workloads, {len(m)} measured, {len(p)} predicted")
        workloads.extend(ws)
        measured.extend(float(x) for x in m)
        predicted.extend(float(x) for x in p)
    return source_ranking(workloads, measured, predicted)


def _round(x: Optional[float], digits: int) -> Optional[float]:
    return None if x is None else round(x, digits)


def figures(loso: RankingSummary, in_sample: RankingSummary) -> Dict[str, Any]:
    """summary.json's ``ranking`` of one source or pooled line: groups and pairs (the same for both, they are
    the measured times'), order agreement and tau-b held out and in-sample."""
    if (loso.pairs, len(loso.groups)) != (in_sample.pairs, len(in_sample.groups)):
        raise ValueError("figures: held-out and in-sample rankings of different groups")
    return {"groups": len(loso.groups), "pairs": loso.pairs, "differ_pct": loso.differ_pct,
            "loso": {"order_agreement_pct": _round(loso.agreement_pct, 1), "agreeing_pairs": loso.agree,
                     "kendall_tau_b": _round(loso.tau_b, 3)},
            "in_sample": {"order_agreement_pct": _round(in_sample.agreement_pct, 1),
                          "agreeing_pairs": in_sample.agree, "kendall_tau_b": _round(in_sample.tau_b, 3)}}


def csv_cells(ranking: Optional[Dict[str, Any]]) -> List[Any]:
    """sources.csv's :data:`CSV_COLUMNS` cells of a :func:`figures` record (empty where not defined)."""
    if ranking is None:
        return [""] * len(CSV_COLUMNS)

    def cell(x: Optional[float]) -> Any:
        return "" if x is None else x

    return [ranking["groups"], ranking["pairs"], cell(ranking["loso"]["order_agreement_pct"]),
            cell(ranking["loso"]["kendall_tau_b"]), cell(ranking["in_sample"]["order_agreement_pct"]),
            cell(ranking["in_sample"]["kendall_tau_b"])]


def console(ranking: Dict[str, Any]) -> str:
    """The columns printed after a source's MAPE: held-out agreement and tau-b, in-sample ones, pairs/groups."""
    def pct(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.0f}%"

    def tau(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:+.2f}"

    lo, ins = ranking["loso"], ranking["in_sample"]
    return (f"{pct(lo['order_agreement_pct']):>8} {tau(lo['kendall_tau_b']):>6} "
            f"{pct(ins['order_agreement_pct']):>8} {tau(ins['kendall_tau_b']):>6} "
            f"{ranking['pairs']:>6}/{ranking['groups']:<5}")


# held-out (LOSO) and in-sample order agreement and tau-b, then the pairs counted / the groups
CONSOLE_HEADER = f"{'LOSO ord':>8} {'tau':>6} {'in-s ord':>8} {'tau':>6} {'pairs/groups':>12}"
