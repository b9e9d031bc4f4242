"""task=simulate: one plan, logged (stdout and the run's vtrain.log), with report.json, timeline.json
(Chrome trace) and timeline.png (Gantt chart) in the run directory."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vtrain.cli import sweep
from vtrain.cli.default_plan import plan_hint, use_recipe_plan
from vtrain.cli.format import headline, render_report
from vtrain.cli.logs import say
from vtrain.cli.run_info import goodput_line, require_run, run_dict, run_lines
from vtrain.io.labels import plan_named
from vtrain.sim.memory_margin import margin_line
from vtrain.workload.system import USABLE_HBM_FRACTION


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.api import simulate_with_trace
    from vtrain.cli.profiles import profile_for
    from vtrain.io.jsonio import write_json
    from vtrain.timeline import chrome_trace, spans
    from vtrain.tracking import simulate_run

    tracker = simulate_run.start(cfg)  # MLflow set up in a second process meanwhile (ended if the input is bad)
    profile = profile_for(cfg)
    require_run(cfg)  # a model without a published run: its tokens from the command line
    chosen, recipe_plan = use_recipe_plan(cfg, profile)  # no plan given: the recipe rule's (vtrain/search/baseline.py)
    if chosen:
        say(chosen)
    report, trace = simulate_with_trace(cfg, profile=profile)
    from vtrain.cli.gantt import plot_timeline  # numpy and matplotlib: only once the plan is valid

    say(render_report(report))
    for line in (*run_lines(cfg), goodput_line(report)):  # the run, price and goodput it assumed
        say(line)
    margin = margin_line(report.peak_memory_bytes, report.memory_capacity_bytes,
                         float(cfg.cluster.get("usable_hbm_fraction", USABLE_HBM_FRACTION)))
    if margin:  # fits the HBM, not its usable share (vtrain.sim.memory_margin)
        say(margin)
    if not report.fits:
        say(recompute_hint(cfg, report, profile))
    hint = plan_hint(cfg, report, profile, recipe_plan)  # below ~10% MFU or not fitting: the cause, a better plan
    if hint:
        say(hint)
    sweep.note(**headline(report))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "report.json", {**report.to_dict(), "run": run_dict(cfg)})
    assert trace is not None
    items = spans(trace)  # read once, written twice
    write_json(out_dir / "timeline.json", chrome_trace(items), indent=None)
    plot_timeline(items, str(out_dir / "timeline.png"), f"{report.model} on {report.cluster}: "
                  f"{plan_named(report.plan)}, {report.iteration_time_s:.2f} s per iteration")
    say(f"wrote {out_dir / 'report.json'}, {out_dir / 'timeline.json'} (open in https://ui.perfetto.dev) "
             f"and {out_dir / 'timeline.png'}")
    if tracker is not None:  # one MLflow run: params, metrics, these three files
        say(tracker.finish(report.to_dict(), out_dir, [out_dir / n for n in ("report.json", "timeline.json",
                                                                             "timeline.png")]))
    return 0


def recompute_hint(cfg: DictConfig, report: Any, profile: Any) -> str:
    """For a plan that does not fit: the least recompute that does (vtrain.sim.recompute_fit), its time and
    peak, and the overrides that set it; or that no recompute setting fits."""
    from vtrain.api import cost_model_for, least_recompute_that_fits
    from vtrain.config.build import build_workload
    from vtrain.sim.recompute_fit import recompute_label, recompute_overrides

    got = least_recompute_that_fits(build_workload(cfg), lambda w: cost_model_for(w, profile))
    if got is None:
        return ("hint: no recompute setting fits this plan (full recompute of every layer neither): shard more "
                "(parallelism.zero_stage, tp, pp, ep) or lower parallelism.micro_batch_size")
    w, fitted = got
    slower = (fitted.iteration_time_s / report.iteration_time_s - 1) * 100
    peak, capacity = fitted.peak_memory_bytes / 2**30, fitted.memory_capacity_bytes / 2**30
    return (f"hint: fits with recompute {recompute_label(w.plan)}: {fitted.iteration_time_s:.2f} s per iteration "
            f"({slower:+.1f}%), {peak:.1f} GiB of {capacity:.0f} GiB ({recompute_overrides(w.plan)})")
