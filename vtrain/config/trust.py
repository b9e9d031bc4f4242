"""Config is data: no override or user config file may name code outside vtrain's own callbacks, launchers and
sweepers, nor a place to write outside the run's own directory.

Hydra turns some strings into code: ``_target_`` (instantiated: callbacks, launcher, sweeper), a logging
config's ``class`` and ``()`` (factories) and ``ext://`` references, environment variables that load code into
child processes (``hydra.job.env_set.LD_PRELOAD``), the SLURM launcher's ``setup`` lines (shell commands) and the
sweeper's ``params`` (overrides applied unchecked). Each is refused in one line unless it is on the allow-lists
below, which hold exactly what vtrain's shipped configs use. :func:`check_key` judges one key and value, from an
override (:mod:`vtrain.cli.overrides`) or from a YAML file in ``--config-dir`` (:mod:`vtrain.config.userfiles`).
"""
from __future__ import annotations

from typing import Any, Optional

# what vtrain's configs instantiate (conf/config.yaml's callbacks, conf/hydra/launcher/*.yaml, Hydra's defaults)
ALLOWED_TARGETS = frozenset({
    "vtrain.hydra_callbacks.RunDirGuard",
    "vtrain.hydra_callbacks.SweepSummary",
    "vtrain.hydra_callbacks.PrepareSharedStores",
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
    "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
})
# the classes and factories of conf/hydra/job_logging/vtrain.yaml (a logging config's "class" and "()")
ALLOWED_LOGGING = frozenset({"logging.StreamHandler", "logging.NullHandler", "logging.Formatter",
                             "vtrain.cli.logs.MaxLevel", "vtrain.cli.logs.RunLogFile"})
ALLOWED_EXT = frozenset({"ext://sys.stdout", "ext://sys.stderr"})  # logging's references to objects
# environment variables that make a child process load code (dynamic loader, Python start-up, shells)
CODE_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "PYTHONPATH",
                      "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "BASH_ENV", "ENV",
                      "PATH", "PERL5OPT", "NODE_OPTIONS"})
# launcher settings that are shell code or a folder outside the run (submitit's setup lines, srun arguments,
# extra sbatch parameters such as --wrap, its log folder)
CODE_LAUNCHER_KEYS = frozenset({"setup", "srun_args", "additional_parameters", "submitit_folder"})
# config fields naming a file or folder that vtrain writes: a config file may name one only inside the working
# directory (relative, no ".."); the command line may name any
WRITTEN_PATHS = frozenset({"search.storage", "tracking.uri", "profile.out_dir", "profile.validation_csv"})
RUN_LOG_PREFIX = "${hydra.runtime.output_dir}/"


def _leaf(key: str) -> str:
    return key.rpartition(".")[2]


def check_key(key: str, value: Any, from_file: bool = False) -> Optional[str]:
    """Why ``key=value`` may not be given (None where it may): ``key`` is the full dotted key (``hydra.*`` for
    Hydra's own settings); ``from_file``: it comes from a user's config file, not the command line."""
    leaf, text = _leaf(key), "" if value is None else str(value)
    if leaf == "_target_" and text not in ALLOWED_TARGETS:
        return (f"{key}={text}: config is data: _target_ may name only vtrain's callbacks, launchers and sweepers "
                f"({', '.join(sorted(t.rpartition('.')[2] for t in ALLOWED_TARGETS))})")
    if not key.startswith("hydra."):
        if key == "calibrate.write" and value is True and from_file:
            return (f"{key}=true: a config file may not rewrite the shipped configs; give calibrate.write=true on the "
                    "command line")
        if from_file and key in WRITTEN_PATHS and value is not None:
            return _written_path(key, text)
        return None
    return _hydra_key(key, leaf, text, from_file)


def _hydra_key(key: str, leaf: str, text: str, from_file: bool) -> Optional[str]:
    parts = key.split(".")
    if key == "hydra.searchpath" or key.startswith("hydra.searchpath."):
        return (f"{key}: config is data: add config folders with --config-dir (its files are checked), not the "
                "search path")
    if parts[1] == "callbacks" and len(parts) > 2 and (len(parts) != 4 or leaf != "_target_"):
        return f"{key}: a callback takes only _target_ (one of vtrain's callbacks), no arguments"
    if parts[1] in ("job_logging", "hydra_logging"):
        if leaf in ("class", "()") and text not in ALLOWED_LOGGING:
            return f"{key}={text}: config is data: a logging class may be one of {', '.join(sorted(ALLOWED_LOGGING))}"
        if text.startswith("ext://") and text not in ALLOWED_EXT:
            return f"{key}={text}: config is data: a logging reference may be {' or '.join(sorted(ALLOWED_EXT))}"
        if leaf == "filename" and not (text.startswith(RUN_LOG_PREFIX) and ".." not in text):
            return f"{key}={text}: a log file is written inside the run directory: {RUN_LOG_PREFIX}<name>.log"
    if parts[1:3] == ["job", "env_set"] and len(parts) == 4 and leaf in CODE_ENV:
        return f"{key}: config is data: {leaf} makes a process load code; set it in the shell that starts vtrain"
    if parts[1] == "launcher" and len(parts) > 2 and parts[2] in CODE_LAUNCHER_KEYS:
        return f"{key}: config is data: the launcher's {parts[2]} is shell code or a folder outside the run"
    if parts[1] == "sweeper" and len(parts) > 2 and parts[2] == "params":
        return f"{key}: the sweeper's params are overrides Hydra applies unchecked; sweep on the command line with -m"
    if key == "hydra.output_subdir" and text and (text.startswith(("/", "~")) or ".." in text.split("/")):
        return f"{key}={text}: must be a folder inside the run directory (relative, no '..')"
    if from_file and key in WRITTEN_PATHS:
        return _written_path(key, text)
    return None


def _written_path(key: str, text: str) -> Optional[str]:
    """A config file's path to write: relative to the working directory, without ``..``; a ``sqlite:///`` or
    ``file://`` URL's path too (other URLs name a server, not a file)."""
    scheme, sep, rest = text.partition("://")
    if sep and scheme not in ("sqlite", "file"):
        return None
    path = (rest[1:] if scheme == "sqlite" else rest) if sep else text
    if path.startswith(("/", "~")) or ".." in path.replace("\\", "/").split("/"):
        return (f"{key}={text}: a config file may name a place to write only inside the working directory "
                "(relative, no '..'); give it on the command line")
    return None


def check_tree(key: str, value: Any, from_file: bool = False) -> Optional[str]:
    """:func:`check_key` on ``key=value`` and, where the value is a mapping or a list of them (an override such
    as ``+hydra.callbacks.x={_target_:...}``), on every key inside it."""
    if isinstance(value, dict):
        for k, v in value.items():
            why = check_tree(f"{key}.{k}" if key else str(k), v, from_file)
            if why:
                return why
        return None
    why = check_key(key, value, from_file)
    if why or not isinstance(value, list):
        return why
    return next((w for w in (check_tree(key, x, from_file) for x in value if isinstance(x, (dict, list))) if w), None)
