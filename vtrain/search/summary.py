"""The text a search prints: counts, the Pareto front as a table, the best plans (within the
constraints, with how far each constraint binds) and the ``task=simulate`` command that reproduces each."""
from __future__ import annotations

from typing import List

from vtrain.io.labels import fmt_days, fmt_duration, fmt_usd, plan_label, plan_sentence
from vtrain.search.constraints import binding
from vtrain.search.outputs import simulate_command
from vtrain.search.records import SearchResult, TrialRecord

HEADER = ("(tp, pp, dp) mb schedule recompute", "GPUs", "iter time", "time to train", "cost", "MFU", "mem/GPU")
KEYS = {"time": ("time_to_train_s", "cost_usd"), "cost": ("cost_usd", "time_to_train_s")}
TITLES = {"time": "fastest", "cost": "cheapest"}


def _cells(r: TrialRecord) -> List[str]:
    m = r.metrics
    return [plan_label(r.plan or {}), f"{m['gpus_used']:.0f}", fmt_duration(m["iteration_time_s"]),
            fmt_days(m["time_to_train_s"]), f"${m['cost_usd']:,.0f}", f"{100 * m['mfu']:.1f}%",
            f"{m['peak_memory_gib']:.1f} GiB"]


def table(rows: List[TrialRecord]) -> str:
    cells = [list(HEADER)] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    fmt = lambda c: "  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(c, widths)))  # noqa: E731
    lines = [fmt(cells[0]), "  ".join("-" * w for w in widths)]
    return "\n".join(lines + [fmt(c) for c in cells[1:]])


def counts(result: SearchResult) -> str:
    n = len(result.records)
    feas = len(result.feasible)
    pruned = sum(1 for r in result.records if r.state == "PRUNED")
    failed = sum(1 for r in result.records if r.state == "FAIL")
    dups = sum(1 for r in result.records if r.duplicate_of is not None)
    what = "valid plans (exhaustive grid)" if result.sampler == "grid" else f"trials ({result.sampler})"
    line = (f"search: {result.model} on {result.cluster}: {n:,} {what}, {feas:,} feasible, {pruned:,} pruned, "
            f"{dups:,} duplicates, {failed:,} failed; {result.simulations:,} simulated in {result.wall_s:.1f} s")
    if result.constraints is not None and result.constraints.active:
        line += f"\n  constraints {result.constraints.text()}: {len(result.satisfying):,} feasible plans within them"
    if result.resumed_trials or result.stale_failed:
        line += (f"\n  study '{result.study_name}': {result.resumed_trials} finished trials were already stored, "
                 f"{result.stale_failed} trials of stopped workers taken over and finished")
    reasons = result.pruned_reasons()
    if reasons:
        top = "; ".join(f"{k} ({v} like it)" for k, v in list(reasons.items())[:4])
        line += f"\n  pruned: {top}"
    return line


def _binding_lines(result: SearchResult, name: str, rec: TrialRecord) -> List[str]:
    lim = result.constraints
    if lim is None or not lim.active:
        return []
    k1, k2 = KEYS[name]
    out = []
    for b in binding(result.feasible, lim, rec, key=lambda r: (r.metrics[k1], r.metrics[k2], r.number)):
        if b.without is None:
            out.append(f"    {b.at_best}: does not bind")
            continue
        m = b.without.metrics
        out.append(f"    {b.at_best}: binds; without it {TITLES[name]} is {plan_label(b.without.plan or {})}, "
                   f"{fmt_days(m['time_to_train_s'])}, {fmt_usd(m['cost_usd'])} ({b.change_pct:.2f}% better)")
    return out


def render(result: SearchResult) -> str:
    within = " within the constraints" if result.constraints is not None and result.constraints.active else ""
    out = [counts(result), "", f"Pareto front{within} ({', '.join(result.objectives)}; {len(result.front)} plans):",
           table(result.front), ""]
    if within and not result.front:
        out.append(f"no feasible plan satisfies {result.constraints.text()}; the closest plans are in trials.csv")
    for name in ("time", "cost"):
        rec = result.best.get(name)
        if rec is None:
            continue
        m = rec.metrics
        out.append(f"{TITLES[name]}{within}: {plan_sentence(rec.plan or {})} on {m['gpus_used']:.0f} GPUs: "
                   f"{fmt_days(m['time_to_train_s'])}, ${m['cost_usd']:,.0f}, MFU {100 * m['mfu']:.1f}% "
                   f"(trial {rec.number})")
        out.extend(_binding_lines(result, name, rec))
        out.append(f"  {simulate_command(result, rec)}")
    return "\n".join(out)


def _beyond(v: float) -> str:
    """How far beyond a limit (a fraction of it): a percentage, or a factor past 10x (1e-300 days asked)."""
    return f"{100 * v:.0f}% over the limit" if v < 9 else f"at {1 + v:.3g}x the limit"


def no_plan_message(result: SearchResult, trials_csv: object) -> str:
    """One line: why no plan came out (nothing feasible, or nothing within the constraints)."""
    what = "plans" if result.sampler == "grid" else "trials"
    lim = result.constraints
    if result.feasible and lim is not None and lim.active:
        close = min(result.feasible, key=lambda r: (sum(max(0.0, v) for v in r.violations.values()), r.number))
        worst = ", ".join(f"{k} {_beyond(v)}" for k, v in close.violations.items() if v > 0)
        return (f"search: no plan for {result.model} on {result.cluster} satisfies {lim.text()} among "
                f"{len(result.feasible):,} feasible {what}; the closest is {plan_label(close.plan or {})} "
                f"({worst}; details in {trials_csv})")
    reasons = "; ".join(f"{k} ({v} like it)" for k, v in list(result.pruned_reasons().items())[:3])
    return (f"search: no feasible plan for {result.model} on {result.cluster} among {len(result.records):,} "
            f"{what}: {reasons or 'empty plan space'} (details in {trials_csv})")
