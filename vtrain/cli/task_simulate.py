"""task=simulate: one plan, logged (stdout and the run's vtrain.log), with report.json, timeline.json
(Chrome trace) and timeline.png (Gantt chart) in the run directory."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from vtrain.cli import sweep
from vtrain.cli.format import headline, plan_label, render_report
from vtrain.cli.logs import say


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.api import simulate_with_trace
    from vtrain.cli.jsonio import write_json
    from vtrain.cli.profiles import profile_for
    from vtrain.timeline import chrome_trace, spans

    report, trace = simulate_with_trace(cfg, profile=profile_for(cfg))
    from vtrain.cli.gantt import plot_timeline  # numpy and matplotlib: only once the plan is valid

    say(render_report(report))
    sweep.note(**headline(report))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "report.json", report.to_dict())
    assert trace is not None
    items = spans(trace)  # read once, written twice
    write_json(out_dir / "timeline.json", chrome_trace(items), indent=None)
    plot_timeline(items, str(out_dir / "timeline.png"), f"{report.model} on {report.cluster}: "
                  f"{plan_label(report.plan)}, {report.iteration_time_s:.2f} s per iteration")
    say(f"wrote {out_dir / 'report.json'}, {out_dir / 'timeline.json'} (open in https://ui.perfetto.dev) "
             f"and {out_dir / 'timeline.png'}")
    return 0
