"""A search in MLflow: one experiment per model x cluster, a parent run per study, a child run per trial.

- Parent run: the full composed config as flattened params and as ``config.yaml``; the run
  directory's outputs (trials.csv, pareto.csv/png/html, best_*.yaml, best_*/report.json and
  timeline.json) as artifacts; counts and the best objective values as metrics. A resumed study
  (same study name and storage) continues its parent run and logs only the trials it lacks.
- Child run per trial: ``create_run`` + ONE ``log_batch`` (params: the plan fields; metrics:
  iteration_time_s, time_to_train_s, cost_usd, mfu, peak_memory_gib, fits; tags: state, pruned
  reason, ``pareto=true|false``) + ``set_terminated``. The time per child run is measured.
- Store: ``tracking.uri``, default ``sqlite:///<cwd>/outputs/mlflow.db`` with artifacts in
  ``outputs/mlartifacts``; the SQLite schema is created/upgraded once, under a file lock, before use
  (concurrent first use races on the migration). A remote server that does not answer fails fast
  (``tracking.http_timeout_s``, no retries) with a one-line :class:`TrackingError`.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from vtrain.errors import VtrainError
from vtrain.search.records import SearchResult, TrialRecord
from vtrain.tracking.store import artifact_root, prepare_store, tracking_uri

MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
CHILD_METRICS = ("iteration_time_s", "time_to_train_s", "cost_usd", "mfu", "peak_memory_gib", "fits", "gpus_used")


class TrackingError(VtrainError):
    """MLflow could not be reached or refused a write; the search results are already on disk."""


@dataclass
class Tracked:
    uri: str
    experiment_id: str
    parent_run_id: str
    child_runs: int  # logged by this call
    seconds_per_child: float
    note: str = ""

    @property
    def runs_url(self) -> str:
        base = self.uri.rstrip("/") if self.uri.startswith("http") else "http://127.0.0.1:5000"
        return f"{base}/#/experiments/{self.experiment_id}/runs"

    @property
    def ui_command(self) -> Optional[str]:
        return None if self.uri.startswith("http") else f"mlflow ui --backend-store-uri {self.uri}"


def experiment_name(tracking: Any, result: SearchResult) -> str:
    return str(tracking.experiment_name or f"vtrain/{result.model}/{result.cluster}")


def _client(uri: str, timeout_s: int) -> Any:
    if uri.startswith("http"):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(timeout_s))
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def flatten(value: Any, prefix: str = "", out: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Nested dicts to ``a.b.c`` keys; lists as their text (MLflow param values are strings)."""
    out = {} if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = str(value)[:6000]
    return out


def _child_batch(rec: TrialRecord, on_front: bool, ts_ms: int) -> tuple:
    from mlflow.entities import Metric, Param, RunTag

    params = [Param(k, str(v)) for k, v in (rec.plan or {}).items()]
    metrics = [Metric(k, float(rec.metrics[k]), ts_ms, 0) for k in CHILD_METRICS
               if k in rec.metrics and math.isfinite(float(rec.metrics[k]))]
    tags = [RunTag("vtrain.state", rec.state), RunTag("pareto", "true" if on_front else "false"),
            RunTag("vtrain.trial", str(rec.number))]
    if rec.reason:
        tags.append(RunTag("vtrain.pruned_reason", rec.reason[:5000]))
    if rec.duplicate_of is not None:
        tags.append(RunTag("vtrain.duplicate_of", str(rec.duplicate_of)))
    return params, metrics, tags


def _parent(client: Any, exp_id: str, result: SearchResult) -> tuple:
    """(run id, {trial number: child run id}) of the study's parent run; a new one if none."""
    if result.study_name and result.storage:
        runs = client.search_runs([exp_id], filter_string=f"tags.`vtrain.study` = '{result.study_name}' and "
                                  f"tags.`vtrain.storage` = '{result.storage}'", max_results=1)
        if runs:
            pid = runs[0].info.run_id
            children = client.search_runs([exp_id], filter_string=f"tags.`mlflow.parentRunId` = '{pid}'",
                                          max_results=50000)
            done = {int(r.data.tags["vtrain.trial"]): r.info.run_id for r in children if "vtrain.trial" in r.data.tags}
            client.update_run(pid, status="RUNNING")
            return pid, done
    tags = {"vtrain.sampler": result.sampler, "vtrain.model": result.model, "vtrain.cluster": result.cluster}
    if result.study_name and result.storage:
        tags.update({"vtrain.study": result.study_name, "vtrain.storage": result.storage})
    name = result.study_name or f"grid-{result.model}-{result.cluster}"
    return client.create_run(exp_id, tags=tags, run_name=name).info.run_id, {}


def _log_parent(client: Any, pid: str, cfg_params: Dict[str, str], result: SearchResult,
                artifacts: Iterable[Path], out_dir: Path, child_s: float) -> None:
    from mlflow.entities import Metric, Param

    existing = client.get_run(pid).data.params
    params = [Param(k, v) for k, v in cfg_params.items() if k not in existing]
    for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
        client.log_batch(pid, params=params[i:i + MAX_PARAMS_PER_BATCH])
    ts = int(time.time() * 1000)
    m = {"trials": len(result.records), "feasible": len(result.feasible), "pareto_size": len(result.front),
         "simulations": result.simulations, "search_wall_s": result.wall_s, "mlflow_s_per_trial": child_s}
    for name in ("time", "cost"):
        rec = result.best.get(name)
        if rec is not None:
            m[f"best_{name}.time_to_train_s"] = rec.metrics["time_to_train_s"]
            m[f"best_{name}.cost_usd"] = rec.metrics["cost_usd"]
    client.log_batch(pid, metrics=[Metric(k, float(v), ts, 0) for k, v in m.items()])
    for path in artifacts:
        if path.is_dir():
            client.log_artifacts(pid, str(path), artifact_path=path.name)
        elif path.is_file():
            client.log_artifact(pid, str(path))
    client.set_terminated(pid, "FINISHED")


def log_search(result: SearchResult, cfg: Any, out_dir: Path, artifacts: Iterable[Path]) -> Tracked:
    """Log a finished search (its files are already in ``out_dir``). Raises :class:`TrackingError`."""
    tracking = cfg.tracking
    uri = tracking_uri(tracking)
    try:
        return _log(result, cfg, out_dir, list(artifacts), uri, int(tracking.http_timeout_s),
                    int(tracking.max_child_runs), experiment_name(tracking, result))
    except VtrainError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrackingError(f"tracking: MLflow at {uri} failed ({first[:300]}); the search results are in "
                            f"{out_dir}") from None


def _log(result: SearchResult, cfg: Any, out_dir: Path, artifacts: List[Path], uri: str, timeout_s: int,
         max_children: int, exp_name: str) -> Tracked:
    import logging

    import mlflow  # noqa: F401  (configures its loggers on import; quiet them afterwards)
    from omegaconf import OmegaConf

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # no per-run "View run at" lines, no migration chatter
    prepare_store(uri)
    client = _client(uri, timeout_s)
    exp = client.get_experiment_by_name(exp_name)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(
        exp_name, artifact_location=artifact_root(uri, exp_name))
    pid, done = _parent(client, exp_id, result)

    config_yaml = out_dir / "config.yaml"
    config_yaml.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    front = {r.number for r in result.front}
    records = result.records
    note = ""
    if result.sampler == "grid" and len(records) > max_children:
        keep = front | {r.number for r in result.best.values()}
        records = [r for r in records if r.number in keep]
        note = (f"{len(result.records):,} grid plans > tracking.max_child_runs={max_children}: child runs for the "
                f"{len(records)} Pareto/best plans only; every plan is in the trials.csv artifact")

    t0 = time.perf_counter()
    logged = 0
    for rec in records:
        if rec.number in done:
            continue
        params, metrics, tags = _child_batch(rec, rec.number in front, int(time.time() * 1000))
        run = client.create_run(exp_id, tags={"mlflow.parentRunId": pid}, run_name=f"trial-{rec.number}")
        client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
        client.set_terminated(run.info.run_id, "FAILED" if rec.state == "FAIL" else "FINISHED")
        logged += 1
    child_s = (time.perf_counter() - t0) / logged if logged else 0.0
    for number, run_id in done.items():  # a resumed study's front moved: re-tag the older children
        client.set_tag(run_id, "pareto", "true" if number in front else "false")
    _log_parent(client, pid, flatten(OmegaConf.to_container(cfg, resolve=True)), result,
                [config_yaml, *artifacts], out_dir, child_s)
    return Tracked(uri, str(exp_id), pid, logged, child_s, note)
