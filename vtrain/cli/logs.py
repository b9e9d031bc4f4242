"""Logging pieces used by ``conf/hydra/job_logging/vtrain.yaml``: reports go through ``logging`` so that
stdout shows them as plain text and each run directory's ``vtrain.log`` keeps them with time stamps;
warnings and errors go to stderr."""
from __future__ import annotations

import logging
from typing import Any, Iterable


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


class DropInterrupts(logging.Filter):
    """Drop records that carry a KeyboardInterrupt traceback (Optuna logs one per interrupted trial)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info
        return not (exc and exc[0] is not None and issubclass(exc[0], KeyboardInterrupt))


def quiet_interrupts(logger_names: Iterable[str] = ("optuna",)) -> None:
    """Attach :class:`DropInterrupts` to the handlers of these loggers and of the root logger, so that
    Ctrl-C ends with vtrain's one line instead of a library's traceback."""
    loggers: list[Any] = [logging.getLogger(n) for n in logger_names] + [logging.getLogger()]
    for lg in loggers:
        for h in lg.handlers:
            if not any(isinstance(f, DropInterrupts) for f in h.filters):
                h.addFilter(DropInterrupts())
