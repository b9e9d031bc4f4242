"""A small MLflow logger for the case studies (self-contained: ``MlflowClient`` only; mlflow is
imported lazily so the studies run without it when ``tracking.enabled=false``).

The store (default ``sqlite:///<cwd>/outputs/mlflow.db``) and its one-time preparation are shared
with the search: :mod:`vtrain.tracking.store`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from vtrain.tracking.store import artifact_root, prepare_store, tracking_uri


def _experiment_id(client: Any, name: str, uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    try:
        return str(client.create_experiment(name, artifact_location=artifact_root(uri)))
    except Exception:  # another job created it in between
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def _flat(prefix: str, value: Any, out: Dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        text = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
        out[prefix] = text[:6000]


def log_study(tracking_cfg: Any, experiment: str, run_name: str, params: Dict[str, Any],
              metrics: Dict[str, float], artifacts: Iterable[Path], tags: Dict[str, str],
              children: Optional[List[Dict[str, Any]]] = None) -> str:
    """One parent run (params, metrics, artifacts) plus optional child runs (``{"name", "params",
    "metrics"}`` each), logged with one ``log_batch`` per run. Returns a link to the runs table."""
    import math

    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(tracking_cfg)
    prepare_store(uri)
    client = MlflowClient(tracking_uri=uri)
    exp_id = _experiment_id(client, experiment, uri)
    now = int(time.time() * 1000)

    def batch(run_id: str, prm: Dict[str, Any], met: Dict[str, float], tg: Dict[str, str]) -> None:
        flat: Dict[str, str] = {}
        _flat("", prm, flat)
        ms = [Metric(k, float(v), now, 0) for k, v in met.items()
              if v is not None and not (isinstance(v, float) and math.isnan(v))]
        client.log_batch(run_id, metrics=ms, params=[Param(k, v) for k, v in flat.items()],
                         tags=[RunTag(k, v) for k, v in tg.items()])

    parent = client.create_run(exp_id, run_name=run_name, tags={"vtrain.task": "casestudy"})
    pid = parent.info.run_id
    try:
        batch(pid, params, metrics, tags)
        for path in artifacts:
            client.log_artifact(pid, str(path))
        for child in children or []:
            c = client.create_run(exp_id, run_name=child["name"], tags={"mlflow.parentRunId": pid})
            batch(c.info.run_id, child.get("params", {}), child.get("metrics", {}), child.get("tags", {}))
            client.set_terminated(c.info.run_id)
        client.set_terminated(pid)
    except BaseException:
        client.set_terminated(pid, status="FAILED")
        raise
    return f"{uri}  experiment '{experiment}' (MLflow UI: #/experiments/{exp_id}/runs), run {pid}"
