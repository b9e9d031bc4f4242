"""Ranking accuracy: does vtrain order plans as the measurements order them?

A planner picks the plan; what matters to its user is the order of the plans of one job, less their absolute
times. Measured runs are grouped by what a job fixes (model, GPU type and count, sequence length, global
batch: :func:`ranking_group`); within a group the runs differ in plan. Runs of one group that share a plan
(:func:`ranking_plan`: the same plan, precision and stack, e.g. one preset measured in two releases) are one
plan to rank, at the geometric mean of their measured and of their predicted times (:func:`by_plan`): what they
differ in is not a choice a planner makes. Per group and pooled over a set:

- pairwise order agreement: of the pairs whose measured times differ by more than :data:`DIFFER_PCT` (the
  slower over the faster), the share the prediction orders the same way (a predicted tie is a miss);
- Kendall's tau-b of measured vs predicted times (Kendall, "The treatment of ties in ranking problems",
  Biometrika 1945), per group; a set's tau is the mean of its groups' taus weighted by their pairs
  (n(n-1)/2): runs of different groups are not comparable.

:func:`ranking_summary` is pure (groups of (measured, predicted) pairs), for the validation and for the
cross-validated calibration; :func:`ranking_of_results` applies it to ``task=validate``'s rows.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from vtrain.workload.workload import Workload

# the rule: measured times less than 5% apart are within run-to-run noise and left out of agreement
DIFFER_PCT = 5.0
MIN_GROUP_LINE_ROWS = 3  # task=validate prints a group's own line from this many runs
MAX_GROUP_LINES = 8  # ... and at most this many groups' lines (the worst ranked of a set of many groups)


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Kendall's tau-b of two paired sequences (ties in either counted as neither concordant nor discordant,
    the denominator corrected for them); None with fewer than 2 pairs or when either is all ties."""
    n = len(x)
    if n != len(y):
        raise ValueError(f"kendall_tau_b: {n} x values, {len(y)} y values")
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                ties_x += 1
            if dy == 0:
                ties_y += 1
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    pairs = n * (n - 1) // 2
    denominator = math.sqrt((pairs - ties_x) * (pairs - ties_y))
    return (concordant - discordant) / denominator if denominator > 0 else None


def order_agreement(measured: Sequence[float], predicted: Sequence[float],
                    differ_pct: float = DIFFER_PCT) -> Tuple[int, int]:
    """(agreeing pairs, pairs counted): the pairs whose measured times differ by more than ``differ_pct``
    percent (slower / faster - 1), and of those the ones the prediction orders the same way."""
    agree = counted = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            lo, hi = sorted((measured[i], measured[j]))
            if lo <= 0 or (hi / lo - 1.0) * 100.0 <= differ_pct:
                continue
            counted += 1
            if (measured[i] - measured[j]) * (predicted[i] - predicted[j]) > 0:
                agree += 1
    return agree, counted


@dataclass(frozen=True)
class GroupRanking:
    """One group's figures: its runs, the pairs counted and agreeing, its tau-b (None: not defined)."""

    label: str
    n: int
    pairs: int
    agree: int
    tau_b: Optional[float]

    @property
    def agreement_pct(self) -> Optional[float]:
        return 100.0 * self.agree / self.pairs if self.pairs else None


@dataclass(frozen=True)
class RankingSummary:
    """A set's ranking figures over its groups of >= 2 runs."""

    groups: Tuple[GroupRanking, ...]
    differ_pct: float = DIFFER_PCT

    @property
    def pairs(self) -> int:
        return sum(g.pairs for g in self.groups)

    @property
    def agree(self) -> int:
        return sum(g.agree for g in self.groups)

    @property
    def agreement_pct(self) -> Optional[float]:
        return 100.0 * self.agree / self.pairs if self.pairs else None

    @property
    def tau_b(self) -> Optional[float]:
        """The groups' tau-b, weighted by their pairs n(n-1)/2 (None: no group has one)."""
        weighted = [(g.n * (g.n - 1) / 2, g.tau_b) for g in self.groups if g.tau_b is not None]
        total = sum(w for w, _ in weighted)
        return sum(w * t for w, t in weighted) / total if total else None

    def line(self) -> str:
        if not self.groups:
            return "ranking: n/a (no two runs share model, GPUs, sequence and batch)"
        agreement = "n/a" if self.agreement_pct is None else f"{self.agreement_pct:.1f}%"
        tau = "n/a" if self.tau_b is None else f"{self.tau_b:.2f}"
        return (f"ranking: order agreement {agreement} ({self.agree} of {self.pairs} pairs measured > "
                f"{self.differ_pct:g}% apart) | Kendall's tau-b {tau} (pair-weighted over {len(self.groups)} "
                f"groups of runs sharing model, GPUs, sequence and batch)")

    def group_lines(self, min_rows: int = MIN_GROUP_LINE_ROWS, most: int = MAX_GROUP_LINES) -> List[str]:
        """A line per group of >= ``min_rows`` runs; of more than ``most`` such groups, the ``most`` ranked
        worst (lowest tau-b) and a line saying so."""
        shown = [g for g in self.groups if g.n >= min_rows]
        out = []
        if len(shown) > most:
            out.append(f"  the {most} groups ranked worst of {len(shown)} with >= {min_rows} runs "
                       "(validation_summary.json: every group):")
            shown = sorted(shown, key=lambda g: (g.tau_b if g.tau_b is not None else 2.0, g.label))[:most]
        for g in shown:
            agreement = "n/a" if g.agreement_pct is None else f"{g.agreement_pct:.0f}%"
            tau = "n/a" if g.tau_b is None else f"{g.tau_b:+.2f}"
            out.append(f"  {g.label}: {g.n} runs, agreement {agreement} ({g.agree}/{g.pairs}), tau-b {tau}")
        return out

    def as_dict(self) -> Dict[str, Any]:
        return {"order_agreement_pct": self.agreement_pct, "pairs": self.pairs, "agreeing_pairs": self.agree,
                "kendall_tau_b": self.tau_b, "differ_pct": self.differ_pct,
                "groups": [{**asdict(g), "agreement_pct": g.agreement_pct} for g in self.groups]}


def ranking_summary(groups: Mapping[str, Sequence[Tuple[float, float]]],
                    differ_pct: float = DIFFER_PCT) -> RankingSummary:
    """Ranking figures of ``groups``: label -> (measured, predicted) times of runs a job could choose between
    (any unit, the same within a group). Groups of fewer than 2 runs have no order and are left out."""
    out = []
    for label, runs in groups.items():
        if len(runs) < 2:
            continue
        measured = [m for m, _ in runs]
        predicted = [p for _, p in runs]
        agree, pairs = order_agreement(measured, predicted, differ_pct)
        out.append(GroupRanking(label, len(runs), pairs, agree, kendall_tau_b(measured, predicted)))
    return RankingSummary(tuple(out), differ_pct)


def ranking_group(w: Workload) -> str:
    """The group a run is ranked in: its GPU type and count, model shape, sequence length and global batch,
    as a readable label."""
    m, p = w.model, w.plan  # the model by its shape (a row's model name may carry the row's own words)
    shape = (f"h{m.hidden_size} L{m.num_layers} heads {m.num_heads}/{m.num_kv_heads} ffn {m.ffn_hidden_size} "
             f"vocab {m.vocab_size}" + (f" E{m.num_experts} top{m.moe_top_k}" if m.is_moe else ""))
    return f"{p.num_gpus} x {w.cluster.gpu.name}, {shape}, seq {p.seq_len}, batch {p.global_batch_size}"


def ranking_plan(w: Any) -> str:
    """What a planner chooses of a run, as a key: its stack and its whole plan (parallelism, schedule, recompute,
    precision, dispatcher, ...); two runs of one group with the same key differ only in what no plan sets."""
    return f"{getattr(getattr(w, 'stack', None), 'name', '')}|{w.plan!r}"


def by_plan(runs: Sequence[Tuple[str, float, float]]) -> List[Tuple[float, float]]:
    """(measured, predicted) per distinct plan of one group's (plan key, measured, predicted) runs: runs of one
    plan at the geometric mean of their measured and of their predicted times, in first-seen order."""
    seen: Dict[str, List[Tuple[float, float]]] = {}
    for key, m, p in runs:
        seen.setdefault(key, []).append((m, p))
    return [(math.exp(sum(math.log(m) for m, _ in ts) / len(ts)), math.exp(sum(math.log(p) for _, p in ts) / len(ts)))
            for ts in seen.values()]


def ranking_of_plans(groups: Mapping[str, Sequence[Tuple[str, float, float]]]) -> RankingSummary:
    """:func:`ranking_summary` of groups of (plan key, measured, predicted) runs, each plan ranked once."""
    return ranking_summary({label: by_plan(runs) for label, runs in groups.items()})


def ranking_of_results(results: Sequence[Any]) -> RankingSummary:
    """The ranking figures of ``task=validate``'s simulated rows (:class:`vtrain.validation.run.RowResult`),
    grouped by their ``group``, each plan once; time is what is ranked (a rate's row by the time it implies)."""
    groups: Dict[str, List[Tuple[str, float, float]]] = {}
    for r in results:
        if r.predicted_ms is not None and r.group:
            groups.setdefault(r.group, []).append((r.plan_key or f"row {r.row.index}", r.measured_ms, r.predicted_ms))
    return ranking_of_plans(groups)


def margin_refusals(results: Sequence[Any]) -> Optional[str]:
    """How many measured runs (which ran) the memory margin would have refused: their predicted peak is above
    their cluster's usable memory (None: no row was simulated)."""
    ok = [r for r in results if r.peak_memory_gib is not None and r.usable_memory_gib is not None]
    if not ok:
        return None
    refused = [r for r in ok if r.peak_memory_gib > r.usable_memory_gib]
    fullest = max(ok, key=lambda r: r.peak_memory_gib / r.usable_memory_gib)
    first = f" (row {refused[0].row.index} first)" if refused else ""
    return (f"memory margin: {len(refused)} of {len(ok)} measured runs predicted above the usable memory "
            f"(cluster.usable_hbm_fraction){first}; the fullest, row {fullest.row.index}, at "
            f"{fullest.peak_memory_gib:.1f} of {fullest.usable_memory_gib:.1f} usable GiB")
