"""task=simulate: one plan, printed, with report.json, timeline.json (Chrome trace) and timeline.png
(Gantt chart) in the run directory."""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from vtrain.cli.format import plan_label, render_report


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.api import simulate_with_trace
    from vtrain.cli.profiles import profile_for
    from vtrain.timeline import chrome_trace, plot_timeline

    report, trace = simulate_with_trace(cfg, profile=profile_for(cfg))
    print(render_report(report))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=2, default=str))
    assert trace is not None
    (out_dir / "timeline.json").write_text(json.dumps(chrome_trace(trace)))
    plot_timeline(trace, str(out_dir / "timeline.png"), f"{report.model} on {report.cluster}: "
                  f"{plan_label(report.plan)}, {report.iteration_time_s:.2f} s per iteration")
    print(f"wrote {out_dir / 'report.json'}, {out_dir / 'timeline.json'} (open in https://ui.perfetto.dev) "
          f"and {out_dir / 'timeline.png'}")
    return 0
