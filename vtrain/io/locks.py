"""An exclusive lock on a file beside a store (``flock``; a no-op without a path).

Used where several processes (local workers, SLURM jobs on a shared disk) touch one SQLite file or
one MLflow store: schema creation, plan claims, child-run logging.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional


@contextlib.contextmanager
def file_lock(path: Optional[Path]) -> Iterator[None]:
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
