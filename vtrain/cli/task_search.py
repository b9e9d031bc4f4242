"""task=search (the default): search the plan space, print the Pareto front, write the run directory's
files, then log everything to MLflow. optuna and mlflow are imported only here, lazily."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from vtrain.errors import VtrainError


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.cli.profiles import profile_for
    from vtrain.search import outputs
    from vtrain.search.run import run_search
    from vtrain.search.summary import render
    from vtrain.tracking.background import Logger

    tracker = Logger(cfg) if bool(cfg.tracking.enabled) else None  # mlflow set up on the other core meanwhile
    try:
        result = run_search(cfg, out_dir, profile=profile_for(cfg))
        paths = outputs.write_all(result, out_dir, int(cfg.search.top_k_artifacts))  # results on disk first
    except BaseException:
        if tracker is not None:
            tracker.close()
        raise
    if not result.front:
        from vtrain.search.summary import no_plan_message

        if tracker is not None:
            tracker.close()
        raise VtrainError(no_plan_message(result, out_dir / "trials.csv"))
    print(render(result))
    print(f"\nwrote {', '.join(p.name for p in paths)} to {out_dir}")
    print(f"reproduce: python -m vtrain task=simulate {' '.join(result.base_overrides)} "
          f"$(cat {out_dir / 'best_time.yaml'})")
    if tracker is None:
        return 0
    tracked = tracker.log(result, out_dir, paths)
    print(f"MLflow: {tracked.child_runs} child runs logged in {tracked.seconds:.2f} s "
          f"(experiment {tracked.experiment_id}, parent run {tracked.parent_run_id})")
    if tracked.note:
        print(f"  {tracked.note}")
    if tracked.ui_command:
        print(f"  {tracked.ui_command}")
    print(f"  {tracked.runs_url}")
    return 0
