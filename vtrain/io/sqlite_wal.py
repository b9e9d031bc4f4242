"""SQLite connection settings for Optuna's and MLflow's SQLAlchemy engines.

With the default rollback journal and ``synchronous=FULL`` every commit fsyncs several times; on
this class of disk an Optuna trial took ~150 ms. WAL journal mode with ``synchronous=NORMAL``
(safe in WAL: a power loss can drop the last commits, never corrupt the file; SQLite docs,
"PRAGMA synchronous") brought it to ~22 ms (measured, see shared/STACK.md). Only sqlalchemy here.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

_INSTALLED = False


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    if not isinstance(dbapi_conn, sqlite3.Connection):
        return
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")  # wait for a concurrent writer instead of failing
    finally:
        cur.close()


def install() -> None:
    """Apply the pragmas to every SQLite connection any SQLAlchemy engine of this process opens
    from now on (Optuna's RDBStorage and MLflow's store create their engines internally)."""
    global _INSTALLED
    if not _INSTALLED:
        event.listen(Engine, "connect", _on_connect)
        _INSTALLED = True


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL, else None (other back-ends, in-memory)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix):] in ("", ":memory:"):
        return None
    return Path(url[len(prefix):])
