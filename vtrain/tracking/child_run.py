"""One complete MLflow child run, written through ``MlflowClient``: its spec (:class:`RunSpec`), the batched
``log_batch`` within MLflow's limits, and :func:`create_child`, which marks a finished run ``vtrain.logged``.
The bulk writer (:mod:`vtrain.tracking.bulk`) writes the same rows in one transaction on a local store;
:mod:`vtrain.tracking.mlflow_writer` syncs children with either."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

LOGGED = "vtrain.logged"
MAX_PARAMS, MAX_TAGS, MAX_METRICS = 100, 100, 1000  # MLflow's log_batch limits


@dataclass
class RunSpec:
    name: str
    params: Dict[str, Any] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)
    tags: Dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"


def log_batch(client: Any, run_id: str, params: Optional[Dict[str, Any]] = None,
              metrics: Optional[Dict[str, float]] = None, tags: Optional[Dict[str, str]] = None) -> None:
    from mlflow.entities import Metric, Param, RunTag

    ts = int(time.time() * 1000)
    ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items()]
    ms = [Metric(k, float(v), ts, 0) for k, v in (metrics or {}).items()
          if isinstance(v, (int, float)) and math.isfinite(float(v))]
    ts_ = [RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()]
    while ps or ms or ts_:
        client.log_batch(run_id, params=ps[:MAX_PARAMS], metrics=ms[:MAX_METRICS], tags=ts_[:MAX_TAGS])
        ps, ms, ts_ = ps[MAX_PARAMS:], ms[MAX_METRICS:], ts_[MAX_TAGS:]


def create_child(client: Any, exp_id: str, parent_id: str, keys: Dict[str, str], spec: RunSpec) -> str:
    """One complete child run: created with its tags, then its params, metrics and the ``vtrain.logged`` mark
    in one ``log_batch``, then ended. Returns its run id."""
    tags = {"mlflow.parentRunId": parent_id, **keys, **{k: str(v)[:5000] for k, v in spec.tags.items()}}
    run = client.create_run(exp_id, tags=tags, run_name=spec.name)
    log_batch(client, run.info.run_id, spec.params, spec.metrics, {LOGGED: "true"})
    client.set_terminated(run.info.run_id, spec.status)
    return str(run.info.run_id)
