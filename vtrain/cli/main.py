"""The Hydra entry point: ``python -m vtrain task=<task> +model=... +cluster=...``.

Bad input ends with one line on stderr (field and rule) and exit code 2, no traceback, and the run
directory Hydra made for the failed job is removed.
"""
from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vtrain.config.compose import CONF_DIR, group_options, resolve
from vtrain.config.store import register_configs
from vtrain.errors import VtrainError

TASKS = ("search", "simulate", "validate", "calibrate", "profile", "measure", "casestudy")


def fail(message: str) -> None:
    print(f"vtrain: error: {message}", file=sys.stderr)
    sys.exit(2)


def precheck_argv(argv: list[str]) -> None:
    """Unknown config-group options fail before Hydra prints its multi-line error."""
    for arg in argv:
        if "=" not in arg or arg.startswith("-"):
            continue
        key, value = arg.split("=", 1)
        group = key.lstrip("+~")
        if "@" in group or "." in group or group.startswith("hydra") or not (CONF_DIR / group).is_dir():
            continue
        for choice in value.split(","):  # multirun lists
            if choice and not (CONF_DIR / group / f"{choice}.yaml").is_file():
                fail(f"{group}={choice} is unknown; one of: {', '.join(group_options(group))}")
    for arg in argv:
        if arg.startswith("task="):
            for t in arg.split("=", 1)[1].split(","):
                if t not in TASKS:
                    fail(f"task={t} is not one of {', '.join(TASKS)}")


def _run(cfg: DictConfig) -> int:
    task = str(cfg.task)
    if task not in TASKS:
        raise VtrainError(f"task={task} is not one of {', '.join(TASKS)}")
    if task not in ("validate", "calibrate", "profile", "measure"):
        resolve(cfg)
    module = importlib.import_module(f"vtrain.cli.task_{task}")
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    return int(module.run(cfg, out_dir) or 0)


class JobInputError(Exception):
    """A multirun job's one-line input error: raised (not exited) so the launcher records that job as
    failed and the sweep goes on. ``sys.exit`` inside a submitit job leaves no result file, and a SLURM
    without job accounting then waits for it forever."""


def _in_multirun() -> bool:
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:
        return False


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> int:
    try:
        return _run(cfg)
    except VtrainError as err:
        _remove_empty_run_dir()
        if _in_multirun():
            print(f"vtrain: error: {err}", file=sys.stderr)
            raise JobInputError(f"vtrain: error: {err}") from None
        fail(str(err))
    except KeyboardInterrupt:
        fail("interrupted")
    return 0


def _remove_empty_run_dir() -> None:
    """Hydra writes .hydra/ and a log before the task runs; a failed input leaves nothing behind."""
    try:
        out = Path(HydraConfig.get().runtime.output_dir)
    except Exception:
        return
    if not out.is_dir():
        return
    if not [p for p in out.iterdir() if p.name not in (".hydra", "vtrain.log", "__main__.log")]:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    precheck_argv(sys.argv[1:])
    register_configs()
    hydra_main()


if __name__ == "__main__":
    main()
