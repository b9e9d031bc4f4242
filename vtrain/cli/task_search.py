"""task=search (the default): search the plan space, print the Pareto front, write the run directory's
files, then log everything to MLflow. optuna and mlflow are imported only here, lazily."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict

from omegaconf import DictConfig

from vtrain.cli import sweep
from vtrain.cli.logs import quiet_interrupts, say
from vtrain.cli.run_info import GOODPUT_NOTE, require_run, run_lines
from vtrain.errors import VtrainError
from vtrain.io.labels import plan_named


def headline(result: Any) -> Dict[str, Any]:
    """The fastest and the cheapest plan of a search, for a sweep summary row."""
    out: Dict[str, Any] = {"trials": len(result.records), "front_size": len(result.front)}
    text = []
    for key, title in (("time", "fastest"), ("cost", "cheapest")):
        rec = result.best.get(key)
        if rec is None:
            continue
        m = rec.metrics
        days = m["time_to_train_s"] / 86400
        out.update({f"{title}_plan": plan_named(rec.plan or {}), f"{title}_days": days,
                    f"{title}_cost_usd": m["cost_usd"], f"{title}_mfu_pct": 100 * m["mfu"]})
        text.append(f"{title} {plan_named(rec.plan or {})} on {m['gpus_used']:.0f} GPUs, {days:,.1f} days, "
                    f"${m['cost_usd']:,.0f}")
    out["best"] = "; ".join(text)
    return out


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.cli.profiles import profile_for
    from vtrain.search import outputs
    from vtrain.search.collector import fewer_collections
    from vtrain.search.run import run_search
    from vtrain.search.summary import render
    from vtrain.tracking.background import Logger

    require_run(cfg)  # a model without a published run: its tokens from the command line
    quiet_interrupts()  # Ctrl-C: vtrain's one line, not Optuna's traceback of the interrupted trial
    tracker = Logger(cfg) if bool(cfg.tracking.enabled) else None  # mlflow and child runs on the other core meanwhile
    try:
        with fewer_collections():
            result = run_search(cfg, out_dir, profile=profile_for(cfg), on_trial=tracker.trial if tracker else None)
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
    for line in (*run_lines(cfg), GOODPUT_NOTE):  # the run and price every plan assumed
        say(line)
    say(render(result))
    from vtrain.search.optimum import report_optimum

    lines, summary_json = report_optimum(result, cfg, out_dir)  # near-optimal set, gain over a baseline, sensitivity
    for line in lines:
        say(line)
    paths = [*paths, summary_json]
    sweep.note(**headline(result))
    say(f"\nwrote {', '.join(p.name for p in paths)} to {out_dir}")
    say(f"reproduce: {outputs.simulate_prefix(result)} $(cat {shlex.quote(str(out_dir / 'best_time.yaml'))})")
    if tracker is None:
        return 0
    tracked = tracker.log(result, out_dir, paths)
    say(f"MLflow: {tracked.child_runs} child runs logged in {tracked.seconds:.2f} s "
        f"(experiment {tracked.experiment_id}, parent run {tracked.parent_run_id})")
    if tracked.note:
        say(f"  {tracked.note}")
    if tracked.ui_command:
        say(f"  {tracked.ui_command}")
    say(f"  {tracked.runs_url}")
    return 0
