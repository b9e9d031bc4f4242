"""vtrain's one MLflow writer (the search and the case studies log through it). ``MlflowClient`` only;
mlflow is imported lazily.

- :func:`experiment_id`: get or create, safe when another process creates it at the same time.
- :func:`standard_tags`: ``mlflow.user``, ``mlflow.source.name``/``type``, ``mlflow.source.git.commit``,
  ``vtrain.version`` and the run description ``mlflow.note.content``.
- :func:`log_batch`: params, metrics (non-finite ones dropped) and tags in as few ``log_batch`` calls as
  MLflow's limits allow.
- :func:`vtrain.tracking.child_run.create_child`: one complete child run (tags at creation, then one ``log_batch``).
- :func:`sync_children`: child runs keyed by a tag (e.g. the trial number): each key gets exactly one
  run. A run a killed process left half-written (no ``vtrain.logged`` tag) is deleted and written again;
  duplicates (two workers logging the same key at once on a server, where no file lock helps) are
  reduced to the oldest run. Every key's run is FINISHED (or FAILED) in one ``log_batch``.
- :func:`log_study`: one parent run with artifacts and optional children (the case studies' shape).
"""
from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from vtrain.tracking.bulk import write_children
from vtrain.tracking.child_run import LOGGED, RunSpec, log_batch


def client_for(uri: str, timeout_s: int = 10) -> Any:
    if uri.startswith("http"):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(timeout_s))
    from mlflow.tracking import MlflowClient

    from vtrain.tracking.store import quiet_mlflow_logging

    quiet_mlflow_logging()
    return MlflowClient(tracking_uri=uri)


def experiment_id(client: Any, name: str, artifact_location: Optional[str] = None) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    try:
        return str(client.create_experiment(name, artifact_location=artifact_location))
    except Exception:  # another process created it in between
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def _git_commit() -> Optional[str]:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def standard_tags(description: str = "") -> Dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("vtrain")
    except PackageNotFoundError:
        ver = "unknown"
    tags = {"mlflow.source.name": " ".join(["python -m vtrain", *sys.argv[1:]])[:5000] if sys.argv else "vtrain",
            "mlflow.source.type": "LOCAL", "vtrain.version": ver}
    try:
        tags["mlflow.user"] = getpass.getuser()
    except (KeyError, OSError):
        pass
    commit = _git_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit
    if description:
        tags["mlflow.note.content"] = description[:20000]
    return tags


def flatten(value: Any, prefix: str = "", out: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Nested dicts to ``a.b.c`` keys; values as text (MLflow params are strings, at most 6,000 chars)."""
    out = {} if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = str(value)[:6000]
    return out


def _filter(tags: Dict[str, str]) -> str:
    return " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())


def find_runs(client: Any, exp_id: str, tags: Dict[str, str], max_results: int = 50000) -> List[Any]:
    from mlflow.entities import ViewType

    return list(client.search_runs([exp_id], filter_string=_filter(tags), run_view_type=ViewType.ACTIVE_ONLY,
                                   max_results=max_results))


def _oldest(runs: Sequence[Any]) -> Any:
    return min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def sync_children(client: Any, exp_id: str, parent_id: str, key_tag: str, group: Dict[str, str],
                  children: Dict[str, RunSpec], retag: Optional[Dict[str, Dict[str, str]]] = None) -> int:
    """Make each key of ``children`` have exactly one complete child run of ``parent_id`` (tagged with
    ``group`` and ``key_tag=<key>``); ``retag`` updates tags of existing runs. Returns runs created."""
    existing: Dict[str, List[Any]] = {}
    for r in find_runs(client, exp_id, group):
        key = r.data.tags.get(key_tag)
        if key is None or r.data.tags.get("mlflow.parentRunId") is None:
            continue
        if LOGGED not in r.data.tags:  # half-written by a killed process: write it again
            client.delete_run(r.info.run_id)
            continue
        existing.setdefault(key, []).append(r)
    for runs in existing.values():
        keep = _oldest(runs)
        for r in runs:
            if r.info.run_id != keep.info.run_id:
                client.delete_run(r.info.run_id)
        if keep.data.tags.get("mlflow.parentRunId") != parent_id:
            client.set_tag(keep.info.run_id, "mlflow.parentRunId", parent_id)
    missing = [({**group, key_tag: key}, spec) for key, spec in children.items() if key not in existing]
    created = len(write_children(client, exp_id, parent_id, missing))  # one transaction on a local store
    for key, tags in (retag or {}).items():
        found = existing.get(key)
        if found:
            run = _oldest(found)
            changed = {k: v for k, v in tags.items() if run.data.tags.get(k) != v}
            if changed:
                log_batch(client, run.info.run_id, tags=changed)
    return created


def log_artifacts(client: Any, run_id: str, paths: Iterable[Path]) -> None:
    for path in paths:
        if path.is_dir():
            client.log_artifacts(run_id, str(path), artifact_path=path.name)
        elif path.is_file():
            client.log_artifact(run_id, str(path))


def log_study(tracking_cfg: Any, experiment: str, run_name: str, params: Dict[str, Any],
              metrics: Dict[str, float], artifacts: Iterable[Path], tags: Dict[str, str],
              children: Optional[List[Dict[str, Any]]] = None, description: str = "") -> str:
    """One parent run (params, metrics, artifacts, standard tags) plus optional child runs (``{"name",
    "params", "metrics", "tags"}`` each). Returns a line with the store and the runs-table link."""
    from vtrain.tracking.store import artifact_root, prepare_store, tracking_uri

    uri = tracking_uri(tracking_cfg)
    prepare_store(uri)
    client = client_for(uri, int(getattr(tracking_cfg, "http_timeout_s", 10) or 10))
    exp_id = experiment_id(client, experiment, artifact_root(uri, experiment))
    parent = client.create_run(exp_id, run_name=run_name, tags={**standard_tags(description), **tags})
    pid = parent.info.run_id
    try:
        log_batch(client, pid, flatten(params), metrics)
        log_artifacts(client, pid, artifacts)
        specs = {str(i): RunSpec(c["name"], flatten(c.get("params", {})), c.get("metrics", {}), c.get("tags", {}))
                 for i, c in enumerate(children or [])}
        sync_children(client, exp_id, pid, "vtrain.child", {"vtrain.parent": pid}, specs)
        client.set_terminated(pid)
    except BaseException:
        client.set_terminated(pid, status="FAILED")
        raise
    return f"{uri}  experiment '{experiment}' (MLflow UI: #/experiments/{exp_id}/runs), run {pid}"
