"""Where an Optuna study lives, how several workers share it, and what happens to trials a killed
worker left RUNNING.

- ``search.storage`` null: a journal file ``optuna.journal`` in the run directory. A path (no ``://``)
  or ``journal:<path>``: Optuna's journal file storage (``JournalStorage(JournalFileBackend(path))``),
  append-only, safe for several processes and on network file systems (SLURM clusters), where SQLite is
  not (SQLite's own documentation, "SQLite over a network"). An SQLAlchemy URL (``sqlite:///x.db``,
  ``postgresql://...``): ``RDBStorage`` (heartbeat interval ``search.heartbeat_s``, for Optuna's own
  tools), SQLite in WAL mode; its schema is created once under a file lock (workers starting together raced on it).
- Trials of dead workers: a RUNNING trial whose process on this host is gone, or that has been held longer
  than ``search.stale_trial_s`` (trials take milliseconds), is taken over and finished by the next worker
  that asks for a trial (:mod:`vtrain.search.loop`), on every kind of storage.
- :func:`study_lock`: a lock across the workers of one study (a symlink lock beside a journal file, as
  Optuna's journal uses; ``flock`` beside an SQLite file; none for servers), held while a worker asks for
  a trial, claims a plan or enqueues a round, so two workers never claim one plan and never overshoot the budget.
"""
from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import optuna

from vtrain.errors import ConfigError
from vtrain.io import sqlite_wal
from vtrain.io.locks import file_lock
from vtrain.search.journal_repair import is_journal, mend_torn_records

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StorageSpec:
    kind: str  # "journal" | "rdb"
    target: str  # journal file path or RDB URL
    heartbeat_s: int = 10

    @property
    def display(self) -> str:
        return self.target

    @property
    def lock_path(self) -> Optional[Path]:
        if self.kind == "journal":
            return Path(self.target)
        db = sqlite_wal.sqlite_path(self.target)
        return db


def storage_spec(search: Any, out_dir: Path) -> StorageSpec:
    raw = search.get("storage") if hasattr(search, "get") else getattr(search, "storage", None)
    beat = int(search.get("heartbeat_s", 10)) if hasattr(search, "get") else 10
    if not raw:
        return StorageSpec("journal", str((out_dir / "optuna.journal").resolve()), beat)
    text = str(raw)
    if text.startswith("journal:"):
        text = text[len("journal:"):].removeprefix("//")
        return StorageSpec("journal", str(Path(text).expanduser().resolve()), beat)
    if "://" not in text:
        return StorageSpec("journal", str(Path(text).expanduser().resolve()), beat)
    return StorageSpec("rdb", text, beat)


def make_storage(spec: StorageSpec) -> optuna.storages.BaseStorage:
    try:
        if spec.kind == "journal":
            from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock, JournalStorage
            from optuna.storages.journal._file import get_lock_file

            Path(spec.target).parent.mkdir(parents=True, exist_ok=True)
            lock = JournalFileSymlinkLock(spec.target)
            if Path(spec.target).is_dir():
                raise ConfigError(f"search.storage={spec.target}: is a directory; name a journal file "
                                  f"({Path(spec.target) / 'study.journal'}) or an RDB URL (sqlite:///study.db)")
            if Path(spec.target).exists():
                if not Path(spec.target).is_file() or not is_journal(Path(spec.target)):
                    raise ConfigError(f"search.storage={spec.target}: exists and is not an Optuna journal (its first "
                                      "line is no journal record); name a new file or a previous search's journal")
                with get_lock_file(lock):  # Optuna's own append lock: no live worker is mid-write
                    for note in mend_torn_records(Path(spec.target)):
                        log.warning("search.storage: %s (a worker was killed while writing it)", note)
            return JournalStorage(JournalFileBackend(spec.target, lock_obj=lock))
        sqlite_wal.install()
        db = sqlite_wal.sqlite_path(spec.target)
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(db.with_name(db.name + ".schema.lock") if db is not None else None), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat: "experimental"
            return optuna.storages.RDBStorage(spec.target, heartbeat_interval=spec.heartbeat_s,
                                              grace_period=6 * spec.heartbeat_s)
    except ConfigError:
        raise
    except Exception as exc:  # bad URL, missing driver, unreachable server, unwritable path
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if "Can't load plugin: sqlalchemy.dialects" in first:  # ftp://..., a typo in the scheme
            first = (f"{spec.target.split('://')[0]}:// is no database SQLAlchemy knows; use a journal file path or an "
                     "RDB URL (sqlite:///study.db, postgresql://user@host/db, mysql://...)")
        raise ConfigError(f"search.storage={spec.target}: {first[:300]}") from None


@contextlib.contextmanager
def study_lock(spec: StorageSpec) -> Iterator[None]:
    """Mutual exclusion among the workers of the study (a no-op for database servers).

    A journal study locks with ``flock`` on a file beside the journal: the kernel drops the lock when its
    holder dies, even by kill -9 (Optuna's symlink lock on a file that does not exist spun forever at 100%
    CPU after such a kill: ``os.stat`` of the dangling link fails before its grace period is checked).
    Linux maps flock to POSIX locks on NFS, so workers on a shared disk exclude each other too."""
    if spec.kind == "journal":
        with file_lock(Path(spec.target + ".vtrain.lock")):
            yield
        return
    db = sqlite_wal.sqlite_path(spec.target)
    with file_lock(db.with_name(db.name + ".vtrain.lock") if db is not None else None):
        yield


def has_lock(spec: StorageSpec) -> bool:
    """Whether :func:`study_lock` excludes the study's workers from each other (a journal file or an SQLite
    file; a database server has no file to lock beside it)."""
    return spec.kind == "journal" or sqlite_wal.sqlite_path(spec.target) is not None
