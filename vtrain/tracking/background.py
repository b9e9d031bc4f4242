"""MLflow logging prepared in a second process while the search runs.

Importing mlflow and opening (or migrating) its store take ~1.5-2 s of CPU, as long as a third of the
default search; on a machine with a second core that work overlaps the search: a forked process imports
mlflow, prepares the store and the experiment, then waits for the finished result, logs it
(:func:`vtrain.tracking.mlflow_logger.log_search`) and sends back what it logged or the one-line error.
Without ``fork`` (or with one CPU) everything runs in this process, as before. The search's files are on
disk before the result is sent, so a failure here never costs results.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
from pathlib import Path
from typing import Any, List, Optional

from vtrain.errors import VtrainError


def _experiment(cfg: Any) -> Optional[str]:
    try:
        return str(cfg.tracking.get("experiment_name") or f"vtrain-{cfg.model.name}-{cfg.cluster.name}")
    except Exception:
        return None


def _serve(conn: Any, cfg: Any) -> None:
    from vtrain.tracking.mlflow_logger import TrackingError, log_search

    try:  # warm-up; any failure shows again, with its one-line message, in log_search below
        from vtrain.tracking import mlflow_writer as mw
        from vtrain.tracking.store import artifact_root, prepare_store, tracking_uri

        uri = tracking_uri(cfg.tracking)
        prepare_store(uri)
        name = _experiment(cfg)
        if name:
            mw.experiment_id(mw.client_for(uri, int(cfg.tracking.http_timeout_s)), name, artifact_root(uri, name))
    except Exception:
        pass
    try:
        msg = conn.recv()
    except (EOFError, KeyboardInterrupt):
        return
    if msg is None:
        return
    result, out_dir, paths = msg
    try:
        conn.send(("ok", log_search(result, cfg, Path(out_dir), [Path(p) for p in paths])))
    except TrackingError as err:
        conn.send(("error", str(err)))
    except BaseException as err:  # noqa: BLE001 - reported as one line in the parent
        conn.send(("error", f"tracking: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"))


class Logger:
    """``Logger(cfg)`` at the start of a search; ``log(result, out_dir, paths)`` at its end."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.proc: Any = None
        self.conn: Any = None
        if "fork" in mp.get_all_start_methods() and (os.cpu_count() or 1) > 1:
            ctx = mp.get_context("fork")
            self.conn, child = ctx.Pipe()
            self.proc = ctx.Process(target=_serve, args=(child, cfg), daemon=True)
            self.proc.start()
            child.close()

    def log(self, result: Any, out_dir: Path, paths: List[Path]) -> Any:
        from vtrain.tracking.mlflow_logger import TrackingError, log_search

        if self.proc is None:
            return log_search(result, self.cfg, out_dir, paths)
        self.conn.send((dataclasses.replace(result, context=None), str(out_dir), [str(p) for p in paths]))
        try:
            status, value = self.conn.recv()
        except EOFError:
            raise TrackingError(f"tracking: the MLflow logging process ended early; the search results are in "
                                f"{out_dir}") from None
        finally:
            self.proc.join(timeout=30)
        if status != "ok":
            raise TrackingError(str(value)) if not isinstance(value, VtrainError) else value
        return value

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=10)
