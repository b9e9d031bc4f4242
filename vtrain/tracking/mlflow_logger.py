"""A search in MLflow: a child run per trial written while the search runs, the parent run at its end.

- Experiment: :func:`vtrain.tracking.naming.experiment_for` (``tracking.experiment_name``, one per sweep
  in a multirun, else ``vtrain-<model>-<cluster>``).
- Parent run per study, named ``<model> <cluster> <sampler> <date time>``, with the standard tags (user,
  source, git commit, vtrain version, a description in ``mlflow.note.content``, the fastest and cheapest
  plans as ``vtrain.best_time``/``vtrain.best_cost``), what was chosen as params
  (:func:`vtrain.tracking.naming.chosen_params`; the whole config is the ``config.yaml`` artifact), counts
  and the best plans' metrics (SI and human: ``days_to_train``, ``cost_musd``, ``mfu_pct``), the run
  directory's files as artifacts and the trials as an MLflow table (``trials_table.json``). A resumed or
  shared study (same study name and storage) continues its parent run.
- Child runs (``tracking.child_runs``): ``all`` (default) one per trial, named by its plan
  (:func:`child_name`), with the plan as params, its predictions as metrics, its state, role
  (front/feasible/outside-constraints/pruned/fail), ``pareto`` and a pruned trial's reason as tags;
  ``front`` the Pareto front and the ``tracking.top_k`` best plans of each objective; ``none``. With
  ``all`` the forked logger (:mod:`vtrain.tracking.background`) writes them while the search runs
  (:class:`ChildStream`), off its critical path. Each is keyed by the trial number
  (:func:`vtrain.tracking.mlflow_writer.sync_children`), so N workers logging one study give exactly one
  child run per trial, and a run half-written by a kill is healed on the next logging.
- Store: ``tracking.uri``, default ``sqlite:///<cwd>/outputs/mlflow.db``; its schema is created once under
  a file lock, and the logging of a local SQLite store runs under that lock. A server that does not answer
  fails fast (``tracking.http_timeout_s``) with a one-line :class:`TrackingError`.
"""
from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from vtrain.errors import VtrainError
from vtrain.io.labels import plan_label, plan_sentence
from vtrain.search.optimum import optimum_metrics, optimum_tags
from vtrain.search.outputs import human_metrics, row, simulate_command
from vtrain.search.records import SearchResult, TrialRecord
from vtrain.tracking import mlflow_writer as mw
from vtrain.tracking.bulk import write_children
from vtrain.tracking.naming import chosen_params, experiment_for, job_label
from vtrain.tracking.store import artifact_root, prepare_store, store_lock, tracking_uri

CHILD_METRICS = ("iteration_time_s", "time_to_train_s", "cost_usd", "mfu", "peak_memory_gib", "fits", "gpus_used",
                 "energy_kwh", "co2_kg")
TABLE = "trials_table.json"


class TrackingError(VtrainError):
    """MLflow could not be reached or refused a write; the search results are already on disk."""


@dataclass
class Tracked:
    uri: str
    experiment_id: str
    parent_run_id: str
    child_runs: int  # created by this call
    seconds: float  # the whole MLflow logging
    note: str = ""

    @property
    def runs_url(self) -> str:
        base = self.uri.rstrip("/") if self.uri.startswith("http") else "http://127.0.0.1:5000"
        return f"{base}/#/experiments/{self.experiment_id}/runs"

    @property
    def ui_command(self) -> Optional[str]:
        return None if self.uri.startswith("http") else f"mlflow ui --backend-store-uri {shlex.quote(self.uri)}"


def experiment_name(tracking: Any, result: Any) -> str:
    return experiment_for(tracking, result.model, result.cluster)


def _group(study_name: Optional[str], storage: Optional[str], parent_id: str) -> Dict[str, str]:
    if study_name and storage:
        return {"vtrain.study": study_name, "vtrain.storage": storage}
    return {"vtrain.parent": parent_id}


def chosen(result: SearchResult, mode: str, top_k: int, max_children: int) -> List[TrialRecord]:
    """The trials that get a child run: ``all`` every trial (up to ``max_children``), ``front`` the Pareto
    front and the ``top_k`` best of each objective, ``none`` none."""
    if mode == "none":
        return []
    if mode == "all" and len(result.records) <= max_children:
        return list(result.records)
    pool = result.satisfying or result.feasible
    keep: Set[int] = {r.number for r in result.front} | {r.number for r in result.best.values()}
    for metric in ("time_to_train_s", "cost_usd"):
        keep |= {r.number for r in sorted(pool, key=lambda r: (r.metrics.get(metric, float("inf")), r.number))[:top_k]}
    return [r for r in result.records if r.number in keep]


def streams(tracking: Any, n_trials: int) -> bool:
    """Whether child runs are written while the search runs (one per trial, within tracking.max_child_runs)."""
    return str(tracking.child_runs) == "all" and n_trials <= int(tracking.max_child_runs)


def child_name(rec: TrialRecord) -> str:
    """The plan in the search's one notation, then the trial: ``(4, 8, 32) mb=1 interleaved x4 ... | trial 126``."""
    if not rec.plan:
        return f"trial {rec.number} ({rec.state.lower()}: no plan)"
    return f"{plan_label(rec.plan)} | trial {rec.number}"


def child_tags(rec: TrialRecord, front: Set[int]) -> Dict[str, str]:
    """What a trial's run says of it once the search has ended (the front and the constraints are known then)."""
    if rec.number in front:
        role = "front"
    elif rec.feasible:
        role = "feasible" if rec.satisfies else "outside-constraints"
    else:
        role = rec.state.lower()
    return {"pareto": str(rec.number in front).lower(), "vtrain.role": role,
            "vtrain.within_constraints": str(rec.satisfies).lower()}


def child_spec(rec: TrialRecord, front: Set[int]) -> mw.RunSpec:
    metrics = {k: float(rec.metrics[k]) for k in CHILD_METRICS if k in rec.metrics}
    metrics.update(human_metrics(rec.metrics))
    tags = {"vtrain.state": rec.state, **child_tags(rec, front)}
    if rec.reason:
        tags["vtrain.pruned_reason"] = rec.reason
    if rec.duplicate_of is not None:
        tags["vtrain.duplicate_of"] = str(rec.duplicate_of)
    return mw.RunSpec(child_name(rec), dict(rec.plan or {}), metrics, tags,
                      "FAILED" if rec.state == "FAIL" else "FINISHED")


def description(result: SearchResult, extra: Optional[str]) -> str:
    lines = [f"**{result.model} on {result.cluster}**: {result.sampler}, {len(result.records):,} plans, "
             f"objectives {', '.join(result.objectives)}."]
    if result.constraints is not None and result.constraints.active:
        lines.append(f"Constraints: {result.constraints.text()} ({len(result.satisfying):,} plans within them).")
    for name, title in (("time", "Fastest"), ("cost", "Cheapest")):
        rec = result.best.get(name)
        if rec is not None:
            m = rec.metrics
            lines.append(f"{title}: {plan_sentence(rec.plan or {})}, {m['gpus_used']:.0f} GPUs, "
                         f"{m['time_to_train_s'] / 86400:.1f} days, ${m['cost_usd']:,.0f}. "
                         f"Reproduce: `{simulate_command(result, rec)}`")
    if extra:
        lines.append(str(extra))
    return "\n\n".join(lines)


def _parent_metrics(result: SearchResult) -> Dict[str, float]:
    m: Dict[str, float] = {"trials": len(result.records), "feasible": len(result.feasible),
                           "within_constraints": len(result.satisfying), "pareto_size": len(result.front),
                           "simulations": result.simulations, "search_wall_s": result.wall_s}
    for name, rec in result.best.items():
        for k in ("time_to_train_s", "cost_usd", "mfu", "iteration_time_s", "gpus_used", "energy_kwh", "co2_kg"):
            if k in rec.metrics:
                m[f"best_{name}.{k}"] = rec.metrics[k]
        m.update({f"best_{name}.{k}": v for k, v in human_metrics(rec.metrics).items()})
    return {**m, **optimum_metrics(result)}  # the gain over the baseline and its interval


@dataclass
class StudyInfo:
    """What a search's parent run is found or made from (a :class:`SearchResult` has the same fields)."""

    model: str
    cluster: str
    sampler: str
    study_name: Optional[str] = None
    storage: Optional[str] = None


def open_parent(client: Any, exp_id: str, info: Any, desc: str = "") -> Tuple[str, bool]:
    """(run id, resumed?) of the study's parent run: the oldest run tagged with the study, else a new one."""
    if info.study_name and info.storage:
        tags = {"vtrain.study": info.study_name, "vtrain.storage": info.storage, "vtrain.kind": "search"}
        runs = mw.find_runs(client, exp_id, tags)
        if runs:
            pid = mw._oldest(runs).info.run_id
            client.update_run(pid, status="RUNNING")
            return pid, True
    else:
        tags = {"vtrain.kind": "search"}
    tags.update({"vtrain.sampler": info.sampler, "vtrain.model": info.model, "vtrain.cluster": info.cluster,
                 **mw.standard_tags(desc)})
    name = f"{info.model} {info.cluster} {info.sampler}{job_label()} {time.strftime('%Y-%m-%d %H:%M:%S')}"
    return client.create_run(exp_id, tags=tags, run_name=name).info.run_id, False


class ChildStream:
    """Child runs written as trials finish (in the forked logger while the search runs): the parent run is
    found or made at the first trial, then each trial not yet logged gets its run. The search's end
    (:func:`log_search`) completes the rest and tags the front."""

    def __init__(self, cfg: Any, info: StudyInfo) -> None:
        self.written: Dict[str, Tuple[str, Dict[str, str]]] = {}  # trial -> (run id, tags) written here
        self.uri = tracking_uri(cfg.tracking)
        prepare_store(self.uri)
        self.client = mw.client_for(self.uri, int(cfg.tracking.http_timeout_s))
        name = experiment_for(cfg.tracking, info.model, info.cluster)
        self.exp_id = mw.experiment_id(self.client, name, artifact_root(self.uri, name))
        with store_lock(self.uri):
            self.pid, self.resumed = open_parent(self.client, self.exp_id, info)
            self.group = _group(info.study_name, info.storage, self.pid)
            self.done = {r.data.tags.get("vtrain.trial") for r in mw.find_runs(self.client, self.exp_id, self.group)}
        self.created = 0
        # a new study in the run directory's own journal: no other process writes its runs
        self.private = not self.resumed and not cfg.search.get("storage")

    def add(self, recs: Sequence[TrialRecord]) -> None:
        """Child runs of the trials not logged yet, in one transaction (:mod:`vtrain.tracking.bulk`)."""
        new = {str(r.number): child_spec(r, set()) for r in recs if str(r.number) not in self.done}
        with store_lock(self.uri):
            self.add_specs(new)
        self.created += len(new)
        self.done |= set(new)

    def finish(self, children: Dict[str, mw.RunSpec], retag: Dict[str, Dict[str, str]]) -> int:
        """A private study's end: the children not streamed, and the tags that changed (the front), from what
        this process wrote (no search of the store). Returns runs created."""
        missing = {k: s for k, s in children.items() if k not in self.done}
        self.add_specs(missing)
        for key, tags in retag.items():
            run_id, had = self.written.get(key, ("", {}))
            changed = {k: v for k, v in tags.items() if had.get(k) != v}
            if run_id and changed:
                mw.log_batch(self.client, run_id, tags=changed)
        return len(missing)

    def add_specs(self, specs: Dict[str, mw.RunSpec]) -> None:
        rows = [({**self.group, "vtrain.trial": key}, spec) for key, spec in specs.items()]
        ids = write_children(self.client, self.exp_id, self.pid, rows)
        self.written.update({key: (rid, spec.tags) for (key, spec), rid in zip(specs.items(), ids)})


def _log_table(client: Any, exp_id: str, pid: str, result: SearchResult, resumed: bool) -> None:
    front = {r.number for r in result.front}
    done: Set[int] = set()
    if resumed:
        done = {int(r["trial"]) for r in read_table(client, pid)}
    rows = [row(r, r.number in front) for r in result.records if r.number not in done][:20000]
    if rows:
        cols = list(rows[0])
        client.log_table(pid, data={c: [r.get(c) for r in rows] for c in cols}, artifact_file=TABLE)


def read_table(client: Any, run_id: str) -> List[Dict[str, Any]]:
    """The rows of a run's trials table (``client.load_table`` reads through the global tracking URI, so
    the artifact is read directly). Empty if the run has none."""
    import json
    import tempfile

    if TABLE not in {a.path for a in client.list_artifacts(run_id)}:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        data = json.loads(Path(client.download_artifacts(run_id, TABLE, tmp)).read_text())
    return [dict(zip(data["columns"], values)) for values in data["data"]]


def log_search(result: SearchResult, cfg: Any, out_dir: Path, artifacts: Iterable[Path],
               stream: Optional[ChildStream] = None) -> Tracked:
    """Log a finished search (its files are already in ``out_dir``; ``stream``: the child runs written while
    it ran). Raises :class:`TrackingError`."""
    uri = tracking_uri(cfg.tracking)
    try:
        return _log(result, cfg, out_dir, list(artifacts), uri, stream)
    except VtrainError:
        raise
    except Exception as exc:
        raise failed(exc, uri, out_dir) from None


def failed(exc: BaseException, uri: str, out_dir: Path) -> TrackingError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return TrackingError(f"tracking: MLflow at {uri} failed ({first[:300]}); the results are in {out_dir}")


def _parent_tags(result: SearchResult, group: Dict[str, str], desc: str) -> Dict[str, str]:
    tags = {**group, "mlflow.note.content": desc}
    for name, rec in result.best.items():  # the chosen plans, in the search's notation (tags: a resume may change them)
        tags[f"vtrain.best_{name}"] = f"{plan_label(rec.plan or {})} | trial {rec.number}"
    return {**tags, **optimum_tags(result)}  # near-optimal count, gain over the baseline (vtrain.search.optimum)


def _log(result: SearchResult, cfg: Any, out_dir: Path, artifacts: List[Path], uri: str,
         stream: Optional[ChildStream]) -> Tracked:
    from omegaconf import OmegaConf

    t0 = time.perf_counter()
    tracking = cfg.tracking
    prepare_store(uri)
    client = stream.client if stream is not None else mw.client_for(uri, int(tracking.http_timeout_s))
    name = experiment_name(tracking, result)
    exp_id = stream.exp_id if stream is not None else mw.experiment_id(client, name, artifact_root(uri, name))
    config_yaml = out_dir / "config.yaml"
    config_yaml.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    desc = description(result, tracking.get("description"))
    picks = chosen(result, str(tracking.child_runs), int(tracking.top_k), int(tracking.max_child_runs))
    front = {r.number for r in result.front}
    with store_lock(uri):  # one worker at a time writes a study's runs (local SQLite store)
        if stream is not None:
            pid, resumed = stream.pid, stream.resumed
        else:
            pid, resumed = open_parent(client, exp_id, result, desc)
        group = _group(result.study_name, result.storage, pid)
        children = {str(r.number): child_spec(r, front) for r in picks}
        retag = {str(r.number): child_tags(r, front) for r in result.records}
        if stream is not None and stream.private:
            created = stream.finish(children, retag)
        else:
            created = mw.sync_children(client, exp_id, pid, "vtrain.trial", group, children, retag)
        existing = client.get_run(pid).data.params
        params = {k: v for k, v in chosen_params(cfg).items() if k not in existing}
        mw.log_batch(client, pid, params, _parent_metrics(result), _parent_tags(result, group, desc))
        _log_table(client, exp_id, pid, result, resumed)
    mw.log_artifacts(client, pid, [config_yaml, *artifacts])
    client.set_terminated(pid, "FINISHED")
    note = ""
    if str(tracking.child_runs) == "all" and len(picks) < len(result.records):
        note = (f"{len(result.records):,} plans > tracking.max_child_runs={tracking.max_child_runs}: child runs for "
                f"the {len(picks)} Pareto/top plans only; every plan is in {TABLE} and trials.csv")
    created += stream.created if stream is not None else 0
    return Tracked(uri, str(exp_id), pid, created, time.perf_counter() - t0, note)
