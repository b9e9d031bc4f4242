"""The Hydra entry point: ``python -m vtrain task=<task> +model=... +cluster=...``.

Bad input ends with one line on stderr (``vtrain: error: <key and rule>``) and exit code 2, no
traceback, and nothing left that this run created (:mod:`vtrain.cli.rundir`). The command line is
checked before Hydra composes it (:mod:`vtrain.cli.overrides`); what Hydra still rejects is reported in
one line too. Ctrl-C ends with one line and exit code 130. In a multirun, a job with bad input fails
alone (its line on stderr, its row in ``sweep_summary.csv``) and the sweep exits with 2.
"""
from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vtrain.cli import logs, rundir, sweep
from vtrain.cli.overrides import TASKS, check_argv, first_line, split_argv
from vtrain.config.compose import CONF_DIR, resolve, set_user_config_dirs
from vtrain.errors import ConfigError, VtrainError

log = logging.getLogger(__name__)
_crashed = False  # the task raised an unexpected exception: a bug, shown with its traceback
_started = False  # a task started: exceptions after this are not the command line's


def one_line(message: object) -> str:
    """An error message on one line, whatever its values held (a newline in an override or a CSV cell)."""
    return str(message).replace("\r", "\\r").replace("\n", "\\n")


def fail(message: str) -> NoReturn:
    print(f"vtrain: error: {one_line(message)}", file=sys.stderr, flush=True)
    sys.exit(2)


def run_script(entry: Callable[[], Optional[int]], overrides: Sequence[str]) -> NoReturn:
    """A script of ``sweeps/`` under the CLI's rules: its overrides checked as the command line's are, a bad
    input one line and exit code 2 (not a traceback from the compose API)."""
    try:
        check_argv(list(overrides))
        code = entry()
    except VtrainError as err:
        fail(str(err))
    finally:
        set_user_config_dirs([])
    sys.exit(code or 0)


def _on_sigint(signum: int, frame: Any) -> None:
    logs.mark_interrupted()  # whatever a library raises while it unwinds is this interrupt
    raise KeyboardInterrupt


def interrupted() -> NoReturn:
    print("vtrain: interrupted (Ctrl-C); finished trials and written files are kept", file=sys.stderr, flush=True)
    sys.exit(130)


def run_task(cfg: DictConfig, out_dir: Path) -> None:
    task = str(cfg.task)
    if task not in TASKS:
        raise ConfigError(f"task={task} is not one of {', '.join(TASKS)}")
    if task not in ("validate", "calibrate", "profile", "measure"):
        resolve(cfg)
    importlib.import_module(f"vtrain.cli.task_{task}").run(cfg, out_dir)


def _multirun() -> bool:
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def _record(status: str, error: str = "") -> None:
    hc = HydraConfig.get()
    sweep.record_job(Path(str(hc.sweep.dir)), sweep.JobRecord(
        num=int(hc.job.num), overrides=list(hc.overrides.task), status=status,
        run_dir="" if status == "error" else str(hc.runtime.output_dir), error=error, metrics=sweep.take_notes()))


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> int:
    global _crashed, _started
    _started = True
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    # the run's --config-dir from Hydra's own record of its search path: a SLURM job (submitit) runs this
    # function in another process, where the command line was never read
    set_user_config_dirs([str(s.path) for s in HydraConfig.get().runtime.config_sources
                          if s.provider == "command-line" and s.schema == "file"])
    multirun = _multirun()
    rundir.start(out_dir, owned=multirun)
    sweep.take_notes()
    try:
        try:
            run_task(cfg, out_dir)
        except Exception:
            if logs.interrupted():  # e.g. Optuna's journal lock losing its rename, or its UnboundLocalError,
                raise KeyboardInterrupt from None  # when Ctrl-C lands inside its bookkeeping
            raise
    except VtrainError as err:
        rundir.discard()
        print(f"vtrain: error: {one_line(err)}", file=sys.stderr, flush=True)
        if not multirun:
            sys.exit(2)
        _record("error", str(err))
        return 2
    except OSError as exc:  # writing a result: a directory or a read-only file where it goes, a full disk
        message = f"cannot write {exc.filename2 or exc.filename or 'an output file'} ({exc.strerror or exc})"
        print(f"vtrain: error: {one_line(message)}", file=sys.stderr, flush=True)
        if not multirun:
            sys.exit(2)
        _record("error", message)
        return 2
    except Exception as exc:
        if not multirun:
            _crashed = True
            raise
        log.exception("job crashed")  # a bug: the traceback on stderr and in the job's log
        _record("crash", f"{type(exc).__name__}: {exc}")
        return 1
    if multirun:
        _record("ok")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> None:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vtrain.config.store import register_configs

    global _crashed, _started
    _crashed = _started = False  # main() may run several times in one process (tests)
    logs.mark_interrupted(False)
    sweep.exit_code = 0
    args = list(sys.argv[1:] if argv is None else argv)
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        check_argv(args)
        os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra raises instead of printing many lines
        register_configs()
        flags, overrides = split_argv(args)
        sys.argv = [sys.argv[0], *flags, *overrides]  # Hydra's parser takes its flags before the overrides only
        with logs.restored_root_logger():
            hydra_main()
    except KeyboardInterrupt:
        interrupted()
    except VtrainError as err:
        fail(str(err))
    except (HydraException, OmegaConfBaseException) as exc:
        if _crashed:
            raise
        fail(first_line(exc))
    except (AssertionError, TypeError, ValueError) as exc:  # OmegaConf internals while composing
        if _started:
            raise
        cause = exc.__cause__
        if isinstance(cause, OSError):  # logging.config cannot open the run's log file (a read-only run dir)
            fail(f"hydra.run.dir (or hydra.sweep.dir): cannot write the run's log file {cause.filename or ''} "
                 f"({cause.strerror or cause})")
        fail(f"the overrides could not be applied to the config ({type(exc).__name__}: {exc})")
    except OSError as exc:  # Hydra creating the run directory (a file in the way, no permission, ...)
        if _started:
            raise
        fail(f"hydra.run.dir (or hydra.sweep.dir): cannot create the run directory {exc.filename or ''} "
             f"({exc.strerror or exc})")
    finally:
        signal.signal(signal.SIGINT, previous)
        set_user_config_dirs([])  # this run's --config-dir ends with it (main() may run again in one process)
    if sweep.exit_code:
        sys.exit(sweep.exit_code)


if __name__ == "__main__":
    main()
