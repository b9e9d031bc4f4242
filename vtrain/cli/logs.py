"""Logging pieces used by ``conf/hydra/job_logging/vtrain.yaml``: reports go through ``logging`` so that
stdout shows them as plain text and each run directory's ``vtrain.log`` keeps them with time stamps;
warnings and errors go to stderr."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterable, Iterator


class MaxLevel(logging.Filter):
    """Pass records below ``level`` only (stdout gets INFO, stderr WARNING and above)."""

    def __init__(self, level: str | int = logging.WARNING) -> None:
        super().__init__()
        self.level = logging.getLevelName(level) if isinstance(level, str) else level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


class RunLogFile(logging.FileHandler):
    """The run directory's log file; counts the bytes it wrote, so that clean-up after a bad input
    can tell whether the file holds anything another process appended (see :mod:`vtrain.cli.rundir`)."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", delay: bool = False) -> None:
        self.bytes_written = 0
        super().__init__(filename, mode, encoding, delay)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.stream is None:
                self.stream = self._open()
            msg = self.format(record) + self.terminator
            self.stream.write(msg)
            self.flush()
            self.bytes_written += len(msg.encode(self.encoding or "utf-8"))
        except Exception:
            self.handleError(record)


@contextmanager
def restored_root_logger() -> Iterator[None]:
    """Give back the root logger as it was (handlers, level) when the block ends, closing the handlers
    Hydra's job logging added: the command line may run more than once in one process (tests, library
    use) and must not leave a run's log file or a stale stdout attached."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for h in root.handlers[:]:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


def say(text: str, logger: logging.Logger | None = None) -> None:
    """A report line: logged (stdout and the run's vtrain.log) when vtrain's job logging is configured,
    printed when a task runs outside Hydra (the Python API, tests)."""
    if any(isinstance(h, RunLogFile) for h in logging.getLogger().handlers):
        (logger or logging.getLogger("vtrain")).info(text)
    else:
        print(text, flush=True)


_interrupted = False


def mark_interrupted(value: bool = True) -> None:
    """Ctrl-C was pressed (the CLI's SIGINT handler), or a new command starts (False)."""
    global _interrupted
    _interrupted = value


def interrupted() -> bool:
    return _interrupted


class DropInterrupts(logging.Filter):
    """Drop records that carry a KeyboardInterrupt traceback (Optuna logs one per interrupted trial)
    and, once Ctrl-C was pressed, the library's other complaints about the trial it interrupted."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info
        if exc and exc[0] is not None and issubclass(exc[0], KeyboardInterrupt):
            return False
        return not (_interrupted and not record.name.startswith("vtrain"))


def quiet_interrupts(logger_names: Iterable[str] = ("optuna",)) -> None:
    """Attach :class:`DropInterrupts` to the handlers of these libraries' loggers (importing the library
    installs its handler) and of the root logger, so that Ctrl-C ends with vtrain's one line instead of
    a library's traceback."""
    import importlib

    for name in logger_names:
        importlib.import_module(name)
    loggers: list[Any] = [logging.getLogger(n) for n in logger_names] + [logging.getLogger()]
    for lg in loggers:
        for h in lg.handlers:
            if not any(isinstance(f, DropInterrupts) for f in h.filters):
                h.addFilter(DropInterrupts())
