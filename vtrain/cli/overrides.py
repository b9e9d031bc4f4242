"""Check the command line before Hydra composes it, so that every mistake is one line naming the key
and the rule, with the closest valid name ("did you mean parallelism.tp?"):

- options: only Hydra's own flags (``-m``, ``--help``, ``--cfg job``, ...);
- group choices (``+model=gpt175b``, ``search=grid``): the option must be one of the group's config
  names, ``+`` where the group is not in the defaults list and no ``+`` where it is;
- keys (``parallelism.tp=8``, ``+extra.x=1``): the key must be in the schema, the value of its type;
- values that name a config (``cluster.gpu=h100_sxm``): a config name of that group, never a path;
- ``task=`` one of the tasks; a sweep (``tp=4,8``) only with ``-m``; no ``~`` deletions.

Hydra's own keys (``hydra.*``, ``hydra/launcher=...``) are left to Hydra.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from vtrain.cli.keys import FREE, children, closest, lookup, suggest_key, type_error
from vtrain.config.compose import CONF_DIR, group_options, set_user_config_dirs
from vtrain.config.compose import check_config_name as config_file
from vtrain.config.trust import check_tree
from vtrain.config.userfiles import check_config_dirs
from vtrain.errors import ConfigError

TASKS = ("search", "simulate", "validate", "calibrate", "profile", "measure", "casestudy")
VALUE_FLAGS = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--cfg", "-c",
               "--package", "-p", "--experimental-rerun", "--shell-completion", "-sc"}
BARE_FLAGS = {"-m", "--multirun", "-h", "--help", "--hydra-help", "--version", "--resolve", "--run", "-r"}
INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
CFG_CHOICES = ("job", "hydra", "all")  # --cfg
FLAG_EXAMPLES = {"--cfg": "job", "-c": "job", "--config-dir": "<dir>", "-cd": "<dir>", "--config-name": "config",
                 "-cn": "config", "--config-path": "<dir>", "-cp": "<dir>"}
# sections that are empty until a config group fills them (+model=..., +casestudy=...)
SECTION_GROUP = {"model": "model", "cluster": "cluster", "gpu": "gpu", "case_study": "casestudy"}
PRESET_GROUPS = ("experiment", "casestudy")  # presets that may select model and cluster themselves
# string fields that name a config of a group (loaded from conf/<group>/<name>.yaml): names, never paths
NAME_FIELDS = {"cluster.gpu": "gpu", "profile.gpu": "gpu", "validate.stack": "stack"}


@lru_cache(maxsize=None)
def groups() -> Tuple[str, ...]:
    return tuple(sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"))


@lru_cache(maxsize=None)
def default_groups() -> Tuple[str, ...]:
    """The groups of ``conf/config.yaml``'s defaults list (chosen with ``group=option``, no ``+``)."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml")).get("defaults", [])  # type: ignore[union-attr]
    return tuple(k for d in defaults if isinstance(d, dict) for k in d if "/" not in k and k != "override hydra")


def split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(Hydra flags with their values, overrides). An unknown ``-option`` is an error."""
    flags: List[str] = []
    overrides: List[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):  # an override never starts with "-"
            name = arg.split("=", 1)[0]
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else None)
            if name in VALUE_FLAGS and (value is None or (value.startswith("-") and "=" not in arg)):
                raise ConfigError(f"{name} needs a value (e.g. {name} {FLAG_EXAMPLES.get(name, '<value>')})")
            if name in ("--cfg", "-c") and value not in CFG_CHOICES:
                raise ConfigError(f"{name} {value}: is not one of {', '.join(CFG_CHOICES)} (the config to show)")
            if name in BARE_FLAGS or (name in VALUE_FLAGS and "=" in arg):
                flags.append(arg)
            elif name in VALUE_FLAGS:
                flags.extend(argv[i:i + 2])
                i += 1
            elif name in ("--info", "-i"):
                flags.append(arg)
                if i + 1 < len(argv) and argv[i + 1] in INFO_CHOICES:
                    flags.append(argv[i + 1])
                    i += 1
            else:
                raise ConfigError(f"unknown option {name}: overrides are key=value (e.g. +model=gpt175b "
                                  "parallelism.tp=8); see python -m vtrain --help")
        else:
            overrides.append(arg)
        i += 1
    return flags, overrides


def config_dir_flags(flags: Sequence[str], names: Tuple[str, ...] = ("--config-dir", "-cd")) -> List[str]:
    """The folders of ``--config-dir`` / ``-cd`` (``--config-dir=DIR`` or ``--config-dir DIR``); ``names``: other
    flags that name a folder (``--config-path``)."""
    dirs: List[str] = []
    for i, flag in enumerate(flags):
        name, eq, value = flag.partition("=")
        if name in names:
            if eq:
                dirs.append(value)
            elif i + 1 < len(flags):
                dirs.append(flags[i + 1])
    return dirs


def check_argv(argv: Sequence[str]) -> None:
    """Raise ConfigError with one line for the first bad flag or override of ``argv``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    flags, texts = split_argv(argv)
    if any(f in ("-h", "--help", "--hydra-help", "--version") for f in flags):
        return
    set_user_config_dirs(config_dir_flags(flags))
    primary = [Path(d).expanduser() for d in config_dir_flags(flags, ("--config-path", "-cp"))]
    check_config_dirs([p.resolve() for p in primary if p.is_dir()])  # a primary config folder of one's own
    multirun = any(f in ("-m", "--multirun") for f in flags)
    selected = preset_selections(texts)
    parser = OverridesParser.create()
    parsed = []
    for text in texts:
        try:
            override = parser.parse_override(text)
        except HydraException as exc:
            reason = str(exc).strip().splitlines()[-1].replace("missing EQUAL at '<EOF>'", "no '='")
            raise ConfigError(f"cannot read '{text}': {reason} (overrides are key=value)") from None
        check_override(override, text, multirun, selected)
        parsed.append((override, text))
    check_sections(parsed)


def preset_selections(texts: Sequence[str]) -> Dict[str, str]:
    """The groups a chosen preset (``+experiment=...``, ``+casestudy=...``) selects in its defaults list
    (``- /model: gpt175b``), each with the preset's override: Hydra lets ``model=<name>`` replace that choice
    and refuses a second ``+model=``."""
    from omegaconf import OmegaConf

    out: Dict[str, str] = {}
    for text in texts:
        key, eq, name = text.lstrip("+").partition("=")
        if not eq or key not in PRESET_GROUPS or "," in name:
            continue
        try:
            node = OmegaConf.to_container(OmegaConf.load(config_file(key, name)))
        except Exception:  # an unknown or unreadable preset: its own check names it
            continue
        for entry in (node.get("defaults") or []) if isinstance(node, dict) else []:
            for k in (entry if isinstance(entry, dict) else {}):
                group = str(k).removeprefix("override ").strip().lstrip("/")
                if group in groups() and not str(k).startswith("override "):
                    out[group] = text
    return out


def check_sections(parsed: List[Tuple[Any, str]]) -> None:
    """A key of ``model``, ``cluster``, ``gpu`` or ``case_study`` needs its group selected (or a preset
    that may select it), with one option: Hydra composes a sweep's base config without a swept group."""
    chosen = {o.key_or_group: o for o, _ in parsed if o.key_or_group in groups()}
    presets = [chosen[g] for g in PRESET_GROUPS if g in chosen]
    for o, text in parsed:
        section, _, rest = o.key_or_group.partition(".")
        group = SECTION_GROUP.get(section)
        if group is None or not rest:
            continue
        selector = chosen.get(group) or (presets[0] if presets else None)
        if selector is None:
            raise ConfigError(f"{text}: {section} is empty until +{group}=<name> selects it")
        if selector.is_sweep_override():
            raise ConfigError(f"{text}: {section} comes from a swept config group, and Hydra composes a sweep "
                              f"without it; set {o.key_or_group} in each config of the group or sweep it alone")


def _values(override: Any) -> List[Any]:
    if not override.is_sweep_override():
        return [override.value()]
    if override.is_interval_sweep():
        return []
    return list(override.sweep_iterator())


def check_override(o: Any, text: str, multirun: bool, selected: Optional[Dict[str, str]] = None) -> None:
    from hydra.core.override_parser.types import OverrideType

    key: str = o.key_or_group
    for value in _values(o):  # config is data: no code, no place to write outside the run (config/trust.py)
        why = check_tree(key, value)
        if why:
            raise ConfigError(why)
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return
    if o.package is not None:
        raise ConfigError(f"{text}: config packages (@) are not supported; select the group itself")
    if o.is_sweep_override() and not multirun:
        raise ConfigError(f"{text} is a sweep: add -m to run one job per value, or give one value (a value with "
                          f"commas in it is quoted: '{key}=\"{text.partition('=')[2]}\"')")
    if o.type == OverrideType.DEL:
        raise ConfigError(f"{text}: removing config entries (~) is not supported; set a value instead")
    adding = o.type in (OverrideType.ADD, OverrideType.FORCE_ADD)
    if key in groups():
        return check_group(key, _values(o), adding, text, selected or {})
    found = lookup(key)
    if found is None:
        raise ConfigError(unknown_key(key))
    tp, optional = found
    sweep = o.is_sweep_override()
    for value in _values(o):
        shown = _show(value) if sweep else text.split("=", 1)[1]
        if tp is not FREE:
            why = type_error(value, tp, optional)
            if why:
                raise ConfigError(f"{key}={shown}: {why}")
        check_named_value(key, value, shown)


def check_group(group: str, choices: List[Any], adding: bool, text: str,
                selected: Optional[Dict[str, str]] = None) -> None:
    in_defaults = group in default_groups()
    by_preset = (selected or {}).get(group)
    if adding and in_defaults:
        raise ConfigError(f"{text}: {group} is chosen by default; write {text.lstrip('+')} (without +)")
    if adding and by_preset:
        raise ConfigError(f"{text}: {by_preset} selects {group} already; write {text.lstrip('+')} (without +) to "
                          "replace its choice")
    if not adding and not in_defaults and not by_preset:
        raise ConfigError(f"{text}: {group} is not chosen by default; write +{text}")
    for choice in choices:
        check_config_name(group, choice, group)


def check_config_name(group: str, value: Any, field: str, shown: str = "") -> None:
    """``value`` must be a config name of ``group`` (a file stem of conf/<group>/, never a path)."""
    options = group_options(group)
    if isinstance(value, str) and value in options:
        return
    hint = closest(str(value), options) if isinstance(value, str) else None
    raise ConfigError(f"{field}={shown or _show(value)} is unknown" + (f" (did you mean {hint}?)" if hint else "")
                      + f"; one of: {', '.join(options)}")


def check_named_value(key: str, value: Any, shown: str) -> None:
    """A field that names a config (:data:`NAME_FIELDS`, e.g. ``cluster.gpu``) names one of its group's
    configs; ``task`` names a task."""
    if key == "task":
        if value not in TASKS:
            hint = closest(str(value), list(TASKS))
            raise ConfigError(f"task={shown} is not one of {', '.join(TASKS)}"
                              + (f" (did you mean {hint}?)" if hint else ""))
    elif key in NAME_FIELDS and value is not None and NAME_FIELDS[key] in groups():
        check_config_name(NAME_FIELDS[key], value, key, shown)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def first_line(exc: BaseException) -> str:
    """One line for an error Hydra or OmegaConf raised while composing (the checks above catch the
    common ones first)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0]
    if text.startswith("Could not override '"):
        key = text.split(chr(39))[1]
        cause = exc.__cause__
        full = str(getattr(cause, "full_key", "") or "")
        if full.startswith(key + ".") and "not in struct" in str(cause):  # a mapping with an entry it lacks
            return f"{key} has no entry '{full[len(key) + 1:]}' to set: add one with +{full}=<value>"
        return f"{key} is not a config key"
    if text.startswith("Could not append to config. An item is already at"):
        key = text.split("'")[1] if "'" in text else "the key"
        return f"{key} is already set: write {key}=<value> without +"
    if "appears more than once in the final defaults list" in text:
        return f"{text}: select a group once (+group=name for model/cluster/gpu, group=name for the others)"
    detail = next((ln for ln in lines[1:] if not ln.startswith(("full_key", "reference_type", "object_type",
                                                                 "See ", "Set the environment"))), None)
    key = str(getattr(exc, "full_key", "") or "")
    if key and key not in text and "nterpolation" in text:  # ${...} in an override: name the key that holds it
        text = f"{key}: {text}"
    return f"{text.rstrip('.')}: {detail}" if detail and len(text) < 60 else text


def unknown_key(key: str) -> str:
    """"<key> is not a config key" with the nearest valid name: within the deepest section of the
    schema that ``key`` starts with, else among all keys and config groups."""
    parts = key.split(".")
    section = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)
                    if lookup(".".join(parts[:i])) is not None), "")
    if section:
        wrong = parts[len(section.split("."))]
        hint = suggest_key(f"{section}.{wrong}")
        if hint:
            return f"{key} is not a config key; did you mean {hint}?"
        keys = children(section)
        return f"{key} is not a config key" + (f"; {section} has: {', '.join(keys)}" if keys else "")
    hint = suggest_key(key, list(groups()))
    if hint in groups():
        hint = f"+{hint}=<name>" if hint not in default_groups() else f"{hint}=<name>"
    if hint:
        return f"{key} is not a config key; did you mean {hint}?"
    return f"{key} is not a config key; see python -m vtrain --help"
