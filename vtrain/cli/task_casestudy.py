"""task=casestudy: one of the paper's case studies, ``python -m vtrain +casestudy=<name>``.

Writes its CSV table(s), ``summary.json`` and a PNG plot into the run directory, prints a summary and
logs a parent MLflow run (params, metrics, artifacts) with child runs for the highlighted rows.
"""
from __future__ import annotations

import time
from pathlib import Path

from omegaconf import DictConfig

from vtrain.cli import sweep
from vtrain.cli.logs import say
from vtrain.config.compose import group_options
from vtrain.errors import ConfigError


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.api import cost_model_for
    from vtrain.casestudies import study
    from vtrain.casestudies.common import write_outputs
    from vtrain.cli.profiles import profile_for
    from vtrain.config.build import build_workload

    if cfg.get("case_study") is None:
        options = ", ".join(group_options("casestudy"))
        raise ConfigError(f"case_study is not set: add +casestudy=<name>, one of: {options}")
    name = str(cfg.case_study.name)
    run_study, plot = study(name)
    t0 = time.perf_counter()
    w = build_workload(cfg)
    cost = cost_model_for(w, profile_for(cfg))
    result = run_study(cfg, w, cost)
    elapsed = time.perf_counter() - t0
    paths = write_outputs(result, out_dir, plot)
    say(result.text)
    say(f"\n{result.title}: done in {elapsed:.1f} s; wrote " + ", ".join(str(p) for p in paths))
    sweep.note(best=result.headline, study=name, study_seconds=elapsed, **result.metrics)
    if bool(cfg.tracking.enabled):
        from vtrain.casestudies.tracking import log_study

        experiment = str(cfg.tracking.get("experiment_name") or f"vtrain/casestudy/{name}")
        where = log_study(cfg.tracking, experiment, run_name=f"{name} {out_dir.name}",
                          params=result.params, metrics={**result.metrics, "study_seconds": elapsed},
                          artifacts=paths, tags={"vtrain.casestudy": name, "vtrain.run_dir": str(out_dir)},
                          children=result.runs)
        say(f"MLflow: {where}")
    return 0
