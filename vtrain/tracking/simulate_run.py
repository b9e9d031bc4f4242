"""``task=simulate`` in MLflow (when ``tracking.enabled``): one run per simulation, in the experiment a search
of the same model and cluster uses (:func:`vtrain.tracking.naming.experiment_for`), tagged
``vtrain.kind=simulate`` and named by its plan (``simulate (8, 35, 12) mb=1 1f1b rc=full``), with what was
chosen and the plan as params, the report's numbers as metrics (SI, and days / million USD / percent beside
them) and report.json, timeline.json and timeline.png as artifacts.

Importing mlflow takes ~1.9 s of CPU, more than a small simulation: a forked process
(:class:`SimulationLogger`) imports it while the plan is simulated and drawn, then opens the store and writes
the run.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from vtrain.io.labels import plan_label
from vtrain.search.outputs import human_metrics
from vtrain.tracking import mlflow_writer as mw
from vtrain.tracking.logger_process import LoggerProcess, die_with_parent
from vtrain.tracking.naming import chosen_params, experiment_for, job_label

REPORT_TAGS = ("model", "cluster", "gpu", "stack", "cost_model", "interval_regime")


def run_spec(report: Dict[str, Any]) -> mw.RunSpec:
    """The run of one simulation, from its ``report.json`` dict: top-level numbers and the memory parts as
    metrics, the plan as params."""
    metrics: Dict[str, float] = {k: float(v) for k, v in report.items()
                                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
    metrics["fits"] = float(bool(report.get("fits")))
    metrics.update({f"memory.{k}": float(v) for k, v in (report.get("memory") or {}).items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if "peak_memory_bytes" in report:
        metrics["peak_memory_gib"] = float(report["peak_memory_bytes"]) / 2**30
    metrics.update(human_metrics(metrics))
    plan = dict(report.get("plan") or {})
    tags = {f"vtrain.{k}": str(report[k]) for k in REPORT_TAGS if k in report}
    tags.update({"vtrain.kind": "simulate", "vtrain.fits": str(bool(report.get("fits"))).lower()})
    name = f"simulate {plan_label(plan)}{job_label()}" if plan else f"simulate{job_label()}"
    return mw.RunSpec(name, {f"plan.{k}": v for k, v in plan.items()}, metrics, tags)


def log_simulation(cfg: Any, report: Dict[str, Any], artifacts: List[Path]) -> Tuple[str, str, str]:
    """Write the run; returns (store URI, experiment id, run id)."""
    from vtrain.tracking.store import artifact_root, prepare_store, tracking_uri

    uri = tracking_uri(cfg.tracking)
    prepare_store(uri)
    client = mw.client_for(uri, int(cfg.tracking.http_timeout_s))
    name = experiment_for(cfg.tracking, str(report.get("model")), str(report.get("cluster")))
    exp_id = mw.experiment_id(client, name, artifact_root(uri, name))
    spec = run_spec(report)
    desc = f"task=simulate: {spec.name[len('simulate '):]} on {report.get('cluster')} ({report.get('model')})"
    if cfg.tracking.get("description"):
        desc += f"\n\n{cfg.tracking.description}"
    run = client.create_run(exp_id, run_name=spec.name, tags={**mw.standard_tags(desc), **spec.tags})
    rid = run.info.run_id
    try:
        mw.log_batch(client, rid, {**chosen_params(cfg, search=False), **spec.params}, spec.metrics)
        mw.log_artifacts(client, rid, artifacts)
        client.set_terminated(rid)
    except BaseException:
        client.set_terminated(rid, status="FAILED")
        raise
    return uri, str(exp_id), str(rid)


def _serve(conn: Any, cfg: Any, parent_end: Any, parent_pid: int) -> None:
    die_with_parent(parent_end, parent_pid)
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (imports: the slow part, and no side effect;
    from mlflow.tracking import MlflowClient  # noqa: F401  the store is opened once the simulation has written its

    try:  # files: a process ended by a bad input never leaves a half-made store)
        msg = conn.recv()
    except (EOFError, OSError, KeyboardInterrupt):
        return
    if msg is None:
        return
    try:
        conn.send(("ok", log_simulation(cfg, msg[0], [Path(p) for p in msg[1]])))
    except BaseException as err:  # noqa: BLE001 - reported as one line in the parent
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        conn.send(("error", first[:300]))


def start(cfg: Any) -> "Optional[SimulationLogger]":
    """A logger when ``tracking.enabled`` (mlflow set up in a second process from now on), else None."""
    return SimulationLogger(cfg) if bool(cfg.tracking.enabled) else None


class SimulationLogger(LoggerProcess):
    """``SimulationLogger(cfg)`` before the simulation; ``log(report, paths)`` once its files are written."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        super().__init__(_serve, cfg)

    def log(self, report: Dict[str, Any], out_dir: Path, paths: List[Path]) -> Tuple[str, str, str]:
        """(URI, experiment id, run id); a one-line :class:`~vtrain.tracking.mlflow_logger.TrackingError`."""
        from vtrain.tracking.mlflow_logger import TrackingError, failed
        from vtrain.tracking.store import tracking_uri

        uri = tracking_uri(self.cfg.tracking)
        if self.proc is None:
            try:
                return log_simulation(self.cfg, report, paths)
            except Exception as exc:
                raise failed(exc, uri, out_dir) from None
        try:
            self.conn.send((report, [str(p) for p in paths]))
            status, value = self.conn.recv()
        except (EOFError, OSError):
            status, value = "error", "the MLflow logging process ended early"
        finally:
            self.proc.join(timeout=30)
        if status != "ok":
            raise TrackingError(f"tracking: MLflow at {uri} failed ({value}); the results are in {out_dir}")
        return tuple(value)  # type: ignore[return-value]

    def finish(self, report: Dict[str, Any], out_dir: Path, paths: List[Path]) -> str:
        """Log the run; the line that says where it is."""
        uri, exp_id, rid = self.log(report, out_dir, paths)
        ui = "" if uri.startswith("http") else f"; mlflow ui --backend-store-uri {shlex.quote(uri)}"
        return f"MLflow: run {rid} in experiment {exp_id}{ui}"
