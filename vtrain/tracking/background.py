"""MLflow logging in a second process while the search runs.

Importing mlflow, opening its store and writing a child run per trial (~20 ms each on a local SQLite store:
4 s for the default search's 200 trials) would double the default search if done after it. A forked
process does that work meanwhile: it imports mlflow, prepares the store and the experiment, then writes
each trial's child run as the search reports it (:meth:`Logger.trial`, the search's ``on_trial`` hook), and
at the end logs the parent run (:func:`vtrain.tracking.mlflow_logger.log_search`) and sends back what it
logged or the one-line error. A thread of that process reads the pipe, so the search never waits on a full
pipe. Without ``fork`` (or with one CPU) everything runs in this process at the end, as before. The
search's files are on disk before the result is sent, so a failure here never costs results. The
process ends with the search's, even one killed with -9
(:func:`vtrain.tracking.logger_process.die_with_parent`).
"""
from __future__ import annotations

import dataclasses
import queue
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

from vtrain.errors import VtrainError
from vtrain.tracking.logger_process import LoggerProcess, die_with_parent

if TYPE_CHECKING:
    from vtrain.tracking.mlflow_logger import ChildStream


def _warm_up(cfg: Any) -> None:
    """Import mlflow, create or migrate the store and the experiment; any failure shows again, with its
    one-line message, when the runs are written."""
    try:
        from vtrain.tracking import mlflow_writer as mw
        from vtrain.tracking.naming import experiment_for
        from vtrain.tracking.store import artifact_root, prepare_store, tracking_uri

        uri = tracking_uri(cfg.tracking)
        prepare_store(uri)
        name = experiment_for(cfg.tracking, str(cfg.model.name), str(cfg.cluster.name))
        mw.experiment_id(mw.client_for(uri, int(cfg.tracking.http_timeout_s)), name, artifact_root(uri, name))
    except Exception:
        pass


def _pump(conn: Any, inbox: "queue.Queue[Any]") -> None:
    """Move the search's messages to ``inbox``; the pipe's end of file (the search died: no other process holds
    its end) as ``("died",)``."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            msg = ("died",)
        inbox.put(msg)
        if msg is None or msg[0] in ("end", "died"):
            return


def _drain(inbox: "queue.Queue[Any]", first: Any) -> List[Any]:
    """``first`` and every message already waiting."""
    out = [first]
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out


class _ParentDied(Exception):
    """The search that started this logger has died: its pipe's end of file, or SIGTERM (:func:`die_with_parent`:
    another fork of the search may still hold the pipe's end)."""


_terminated = False  # SIGTERM came: acted on between two writes (:func:`_next`), never inside one


def _on_term(signum: int, frame: Any) -> None:
    global _terminated
    _terminated = True


def _next(inbox: "queue.Queue[Any]") -> Any:
    """The next message from the search; :class:`_ParentDied` once SIGTERM says the search is gone."""
    while not _terminated:
        try:
            return inbox.get(timeout=0.5)
        except queue.Empty:
            pass
    raise _ParentDied


class _Streamed:
    """The child runs this logger has written so far: ``stream`` holds the parent run once there is one."""

    def __init__(self) -> None:
        self.stream: Optional[ChildStream] = None
        self.broken = False  # a failed child write stops the streaming; log_search at the end reports the error


def _mark_killed(state: _Streamed) -> None:
    """The parent run of a study this search had to itself (the run directory's own journal) ends KILLED; a
    shared or resumed study's parent run stays for the workers that finish the study."""
    stream = state.stream
    if stream is None or not stream.private:
        return
    from vtrain.tracking.store import store_lock

    try:
        with store_lock(stream.uri):
            stream.client.set_terminated(stream.pid, "KILLED")
    except Exception:  # the store is unreachable: the run stays RUNNING, as before
        pass


def _serve(conn: Any, cfg: Any, parent_end: Any, parent_pid: int) -> None:
    signal.signal(signal.SIGTERM, _on_term)  # before die_with_parent asks for the signal
    state = _Streamed()
    try:
        die_with_parent(parent_end, parent_pid)
        inbox: "queue.Queue[Any]" = queue.Queue()
        threading.Thread(target=_pump, args=(conn, inbox), daemon=True).start()
        _warm_up(cfg)
        _loop(conn, cfg, inbox, state)
    except _ParentDied:
        _mark_killed(state)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # done: the search's death later is no news here


def _loop(conn: Any, cfg: Any, inbox: "queue.Queue[Any]", state: _Streamed) -> None:
    """Write the trials' child runs as they arrive; at the search's end its parent run, and answer."""
    from vtrain.tracking.mlflow_logger import ChildStream, TrackingError, log_search  # mlflow: imported here

    while True:
        msgs = _drain(inbox, _next(inbox))
        trials = [m for m in msgs if m is not None and m[0] == "trials"]
        if trials and not state.broken:  # every trial that has arrived, in one transaction
            try:
                state.stream = state.stream or ChildStream(cfg, trials[0][1])
                state.stream.add([rec for m in trials for rec in m[2]])
            except Exception:
                state.broken = True
        for msg in msgs:
            if msg is None:
                return
            if msg[0] == "died":
                raise _ParentDied
            if msg[0] == "end":
                result, out_dir, paths = msg[1:]
                try:
                    tracked = log_search(result, cfg, Path(out_dir), [Path(p) for p in paths],
                                         None if state.broken else state.stream)
                    state.stream = None  # the parent run has its final status
                    conn.send(("ok", tracked))
                except TrackingError as err:
                    conn.send(("error", str(err)))
                except BaseException as err:  # noqa: BLE001 - reported as one line in the parent
                    first = str(err).splitlines()[0] if str(err) else ""
                    conn.send(("error", f"tracking: {type(err).__name__}: {first}"))
                return


class Logger(LoggerProcess):
    """``Logger(cfg)`` at the start of a search; ``trial(...)`` as each trial ends (when child runs are
    streamed); ``log(result, out_dir, paths)`` at its end."""

    def __init__(self, cfg: Any) -> None:
        from vtrain.tracking.mlflow_logger import streams

        self.cfg = cfg
        self.stream = streams(cfg.tracking, int(cfg.search.n_trials)) and str(cfg.search.sampler) != "grid"
        super().__init__(_serve, cfg)

    def trial(self, study_name: str, storage: str, rec: Any) -> None:
        """The search's ``on_trial`` hook: the trial's child run is written by the other process now."""
        if self.proc is None or not self.stream:
            return
        from vtrain.tracking.mlflow_logger import StudyInfo

        info = StudyInfo(str(self.cfg.model.name), str(self.cfg.cluster.name), str(self.cfg.search.sampler),
                         study_name, storage)
        try:
            self.conn.send(("trials", info, [rec]))
        except (OSError, ValueError):  # the logger died: the end reports it
            self.stream = False

    def log(self, result: Any, out_dir: Path, paths: List[Path]) -> Any:
        from vtrain.tracking.mlflow_logger import TrackingError, log_search

        if self.proc is None:
            return log_search(result, self.cfg, out_dir, paths)
        try:
            self.conn.send(("end", dataclasses.replace(result, context=None), str(out_dir), [str(p) for p in paths]))
            status, value = self.conn.recv()
        except (EOFError, OSError):
            raise TrackingError(f"tracking: the MLflow logging process ended early; the search results are in "
                                f"{out_dir}") from None
        finally:
            self.proc.join(timeout=30)
        if status != "ok":
            raise TrackingError(str(value)) if not isinstance(value, VtrainError) else value
        return value
