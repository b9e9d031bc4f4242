"""One function run in a forked process beside this one (a search's plots while it writes its tables).

The child inherits the arguments (nothing is pickled but the outcome) and sends back None or the error it
raised; :meth:`Forked.join` re-raises that error here. Without ``fork`` or with one CPU the function runs
in this process at :meth:`Forked.join`, so callers are the same either way.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from typing import Any, Callable, Optional


def _child(conn: Any, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
    try:
        fn(*args)
        conn.send(None)
    except BaseException as err:  # noqa: BLE001 - re-raised in the parent
        try:
            conn.send(err)
        except Exception:  # an error that does not pickle: its type and message
            conn.send(RuntimeError(f"{type(err).__name__}: {err}"))


class Forked:
    """``Forked(fn, *args)`` starts ``fn(*args)``; ``join()`` waits for it and raises what it raised."""

    def __init__(self, fn: Callable[..., object], *args: Any) -> None:
        self.fn, self.args = fn, args
        self.proc: Any = None
        self.conn: Any = None
        if "fork" in mp.get_all_start_methods() and (os.cpu_count() or 1) > 1:
            ctx = mp.get_context("fork")
            self.conn, child = ctx.Pipe(duplex=False)
            self.proc = ctx.Process(target=_child, args=(child, fn, args), daemon=True)
            self.proc.start()
            child.close()

    def join(self) -> None:
        if self.proc is None:
            self.fn(*self.args)
            return
        try:
            err: Optional[BaseException] = self.conn.recv()
        except EOFError:  # killed, or exited without a word
            self.proc.join()
            err = RuntimeError(f"{getattr(self.fn, '__name__', 'a forked function')}: its process ended early "
                               f"(exit code {self.proc.exitcode})")
        finally:
            self.proc.join()
            self.conn.close()
        if err is not None:
            raise err
