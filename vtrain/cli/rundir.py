"""What this process created in its run directory, so that a failed input removes exactly that.

Before Hydra makes the run directory, :func:`claim` takes a directory no other process has: with the
default, time-stamped name, two runs started in the same second would share one, so the second gets
``<time>-2`` (``os.mkdir`` is atomic); a directory given as ``hydra.run.dir`` is used as it is, and
what it already holds is recorded. After a bad input, :func:`discard` deletes only the files this
process wrote there (Hydra's ``.hydra/*.yaml`` copies, unchanged since, and the log, if nobody else
appended to it), then the directories it created, if empty, and puts back a previous run's ``.hydra``
copies that Hydra overwrote. A task that already wrote results (e.g.
``trials.csv``, which its error line names) keeps its directory.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")
LOG_NAMES = ("vtrain.log", "__main__.log")
Identity = Tuple[int, int, int]  # inode, size, mtime_ns


@dataclass
class Ledger:
    path: Path
    created_dirs: List[Path] = field(default_factory=list)  # made by this process, parents first
    before: Set[str] = field(default_factory=set)  # entries (top level and .hydra/) before the run
    written: Dict[str, Identity] = field(default_factory=dict)  # Hydra's copies right after writing
    saved: Dict[str, bytes] = field(default_factory=dict)  # a previous run's copies, restored after a bad input


_ledger: Optional[Ledger] = None


def _entries(path: Path) -> Set[str]:
    """Top-level entries and those of ``.hydra/`` (where Hydra writes), relative to ``path``."""
    out: Set[str] = set()
    if path.is_dir():
        out.update(p.name for p in path.iterdir())
        hydra = path / ".hydra"
        if hydra.is_dir():
            out.update(f".hydra/{p.name}" for p in hydra.iterdir())
    return out


def _identity(path: Path) -> Optional[Identity]:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _makedirs(path: Path) -> List[Path]:
    """``mkdir -p``; returns the directories it created, parents first."""
    missing: List[Path] = []
    p = path.absolute()
    while not p.exists():
        missing.append(p)
        p = p.parent
    made = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
            made.append(d)
        except FileExistsError:
            pass
    return made


def claim(run_dir: str, exclusive: bool) -> Path:
    """Make the run directory before Hydra does and start the ledger. ``exclusive``: the directory
    must be new (the default time-stamped name): if it exists, the first free ``<name>-<n>``."""
    global _ledger
    path = Path(run_dir).absolute()
    created = _makedirs(path.parent)
    if exclusive:
        n = 1
        while True:
            cand = path if n == 1 else path.with_name(f"{path.name}-{n}")
            try:
                os.mkdir(cand)
            except FileExistsError:
                n += 1
                continue
            created.append(cand)
            path = cand
            break
    before = _entries(path)
    if not path.exists():
        created += _makedirs(path)
    _ledger = Ledger(path, created, before, saved=_previous_copies(path, before))
    return path


def _previous_copies(path: Path, before: Set[str]) -> Dict[str, bytes]:
    """The bytes of a previous run's ``.hydra/*.yaml`` (small files), which Hydra overwrites before the task
    sees its input."""
    saved: Dict[str, bytes] = {}
    for rel in HYDRA_FILES:
        if rel in before:
            try:
                saved[rel] = (path / rel).read_bytes()
            except OSError:
                pass
    return saved


def start(path: Path, owned: bool) -> None:
    """At the start of the task: record Hydra's copies as written by this process. ``owned``: a
    directory only this job uses (a multirun job's own subdirectory) when no ledger was claimed."""
    global _ledger
    path = path.absolute()
    if _ledger is None or _ledger.path != path:
        _ledger = Ledger(path, [path] if owned else [], set() if owned else _entries(path))
    for rel in HYDRA_FILES:
        ident = _identity(path / rel)
        if ident is not None and (rel not in _ledger.before or rel in _ledger.saved):
            _ledger.written[rel] = ident


def _own_log_bytes(path: Path) -> Optional[int]:
    """Bytes this process wrote to the log file ``path`` (its :class:`RunLogFile` handler), or None."""
    from vtrain.cli.logs import RunLogFile

    for h in logging.getLogger().handlers:
        if isinstance(h, RunLogFile) and Path(h.baseFilename) == path:
            h.flush()
            return h.bytes_written
    return None


def discard() -> List[Path]:
    """Remove what this process created in the run directory (see the module doc); returns what it
    removed. Nothing is removed when the task wrote any result file."""
    global _ledger
    led, _ledger = _ledger, None
    if led is None or not led.path.is_dir():
        return []
    new = _entries(led.path) - led.before
    ours = set(HYDRA_FILES) | set(LOG_NAMES) | {".hydra"}
    if new - ours:
        return []  # results on disk: keep them and the config that made them
    removed: List[Path] = []
    for rel, data in led.saved.items():  # the previous run's config, as its results were made
        if led.written.get(rel) is not None and _identity(led.path / rel) == led.written[rel]:
            (led.path / rel).write_bytes(data)
    for rel in sorted(new & set(HYDRA_FILES)):
        if led.written.get(rel) is not None and _identity(led.path / rel) == led.written[rel]:
            (led.path / rel).unlink()
            removed.append(led.path / rel)
    for name in sorted(new & set(LOG_NAMES)):
        log = led.path / name
        mine = _own_log_bytes(log)
        size = _identity(log)
        if mine is not None and size is not None and size[1] == mine:
            log.unlink()
            removed.append(log)
    dirs = ([led.path / ".hydra"] if ".hydra" in new else []) + list(reversed(led.created_dirs))
    for d in dirs:
        try:
            d.rmdir()  # only if empty: never removes what another process put there
            removed.append(d)
        except OSError:
            pass
    return removed
