"""The forked process that writes to MLflow beside a search or a simulation (:mod:`vtrain.tracking.background`,
:mod:`vtrain.tracking.simulate_run`): started before the work so that importing mlflow costs it nothing,
spoken to over a pipe, and never outliving the process that started it, even one killed with -9
(:func:`die_with_parent`). Without ``fork`` (or with one CPU) there is no process (``proc`` None) and the
caller logs in its own process at the end.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
from typing import Any, Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal this process gets when its parent dies


def die_with_parent(parent_end: Any, parent_pid: int) -> None:
    """Make sure this logger never outlives its parent: close its inherited copy of the parent's pipe end (a
    fork copies it, and while any copy is open the parent's death is no end of file here), and on Linux ask
    the kernel to send SIGTERM when the parent dies (prctl(2) PR_SET_PDEATHSIG), even by kill -9."""
    parent_end.close()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the end of file still ends this process
            pass
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os._exit(0)


class LoggerProcess:
    """``serve(child_end, *args, parent_end, parent_pid)`` in a forked daemon process; ``conn`` is this side's
    pipe end. ``serve`` calls :func:`die_with_parent` first."""

    def __init__(self, serve: Callable[..., None], *args: Any) -> None:
        self.proc: Any = None
        self.conn: Any = None
        if "fork" in mp.get_all_start_methods() and (os.cpu_count() or 1) > 1:
            ctx = mp.get_context("fork")
            self.conn, child = ctx.Pipe()
            self.proc = ctx.Process(target=serve, args=(child, *args, self.conn, os.getpid()), daemon=True)
            self.proc.start()
            child.close()

    def close(self) -> None:
        """Ask the process to end (None down the pipe) and wait for it."""
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=10)
