"""The text a search prints: counts, the Pareto front as a table, the fastest and cheapest plans and
the ``task=simulate`` command that reproduces each."""
from __future__ import annotations

from typing import List

from vtrain.cli.format import fmt_duration, plan_label
from vtrain.search.outputs import simulate_command
from vtrain.search.records import SearchResult, TrialRecord

HEADER = ("plan", "GPUs", "iter time", "time to train", "cost", "MFU", "mem/GPU")


def _cells(r: TrialRecord) -> List[str]:
    m = r.metrics
    return [plan_label(r.plan or {}), f"{m['gpus_used']:.0f}", fmt_duration(m["iteration_time_s"]),
            fmt_duration(m["time_to_train_s"]), f"${m['cost_usd']:,.0f}", f"{100 * m['mfu']:.1f}%",
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
    if result.resumed_trials or result.stale_failed:
        line += (f"\n  resumed study '{result.study_name}': {result.resumed_trials} finished trials kept, "
                 f"{result.stale_failed} interrupted (RUNNING) trials marked FAIL")
    reasons = result.pruned_reasons()
    if reasons:
        top = "; ".join(f"{k} ({v} like it)" for k, v in list(reasons.items())[:4])
        line += f"\n  pruned: {top}"
    return line


def render(result: SearchResult) -> str:
    out = [counts(result), "",
           f"Pareto front ({', '.join(result.objectives)}; {len(result.front)} plans):", table(result.front), ""]
    for name, title in (("time", "fastest"), ("cost", "cheapest")):
        rec = result.best.get(name)
        if rec is None:
            continue
        m = rec.metrics
        out.append(f"{title}: {plan_label(rec.plan or {})} on {m['gpus_used']:.0f} GPUs: "
                   f"{fmt_duration(m['time_to_train_s'])}, ${m['cost_usd']:,.0f} (trial {rec.number})")
        out.append(f"  {simulate_command(result, rec)}")
    return "\n".join(out)
