"""Where MLflow runs go, shared by the search and the case studies.

Default store: ``sqlite:///<cwd>/outputs/mlflow.db`` with artifacts in ``outputs/mlartifacts``. Several
processes creating one new SQLite store race on its schema migration (STACK.md), so the schema is
created/upgraded once, under an exclusive file lock, before use (:func:`prepare_store`; a multirun also
calls it up front from :mod:`vtrain.hydra_callbacks`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from vtrain.io import sqlite_wal
from vtrain.io.locks import file_lock

MLFLOW_DB = Path("outputs") / "mlflow.db"


def tracking_uri(tracking: Any) -> str:
    """``tracking.uri``, else the local SQLite store under the working directory."""
    uri = tracking.get("uri") if hasattr(tracking, "get") else getattr(tracking, "uri", None)
    return str(uri) if uri else f"sqlite:///{MLFLOW_DB.resolve()}"


def artifact_root(uri: str, name: Optional[str] = None) -> Optional[str]:
    """Artifacts beside a SQLite store (per experiment ``name``); None lets a server decide."""
    path = sqlite_wal.sqlite_path(uri)
    if path is None:
        return None
    root = path.parent / "mlartifacts"
    if name:
        root = root / "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return root.resolve().as_uri()


def store_lock(uri: str) -> Any:
    """The lock of a local SQLite store (schema creation, idempotent child runs); a no-op for servers."""
    path = sqlite_wal.sqlite_path(uri)
    return file_lock(path.with_name(path.name + ".lock") if path is not None else None)


def prepare_store(uri: str) -> None:
    """Create or upgrade the SQLite schema once, under an exclusive file lock (no-op for servers)."""
    sqlite_wal.install()
    path = sqlite_wal.sqlite_path(uri)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with store_lock(uri):
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        quiet_mlflow_logging()
        SqlAlchemyStore(uri, str(path.parent / "mlartifacts"))  # runs MLflow's migrations if needed


def quiet_mlflow_logging() -> None:
    """MLflow's import gives its loggers a stderr handler at INFO ("Creating initial MLflow database
    tables...", alembic's migration steps): keep stderr for vtrain's one error line and warnings."""
    import logging

    import mlflow  # noqa: F401  (configures its loggers on import)

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
