"""The test session's compose: Hydra's work done once per set of config-group choices.

Hydra spends ~0.2 s of CPU on one compose (it reads ~24 YAML files, builds the defaults tree and merges them),
and the unit tests compose the same few models and clusters hundreds of times, each with its own value
overrides (``parallelism.tp=4``, ``training.global_batch_size=512``). Hydra itself composes in two steps
(``ConfigLoaderImpl._load_configuration_impl``): the defaults list, chosen by the config-group overrides, is
merged into one config set to struct mode; then the other overrides, the config overrides, are applied to it in
order by ``ConfigLoaderImpl._apply_overrides_to_config``. The result does not depend on where a config override
stands among the group overrides. So this compose keeps the first step's result per distinct list of group
overrides (Hydra's own compose, run once) and does the second step itself with Hydra's own function on a deep
copy: the value a fresh compose gives, which a test may change freely.

An override counts as a config override only where Hydra's ``repo.group_exists`` cannot say otherwise: a dotted
key (``parallelism.tp``; no config group of vtrain has a dot in its name) outside ``hydra.``, not a sweep and not
a dict value. Everything else (``+model=...``, ``task=...``, ``~cluster``) is part of the memo's key. A
``--config-dir`` compose (whose files a test may rewrite) goes to Hydra each time; failures are never kept (each
call raises afresh). tests/unit/test_compose_memo.py checks that this compose equals Hydra's on value, + and ~
overrides and on errors; VTRAIN_TEST_FRESH_COMPOSE=1 turns it off (bench/mutation.sh does).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


def _split(overrides: Sequence[str]) -> Optional[Tuple[Tuple[str, ...], List[Any]]]:
    """(the group overrides, Hydra's parsed config overrides), or None where only Hydra's compose can say."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    except Exception:
        return None  # Hydra raises the same error, with its message, on the real compose
    groups: List[str] = []
    values: List[Any] = []
    for line, override in zip(overrides, parsed):
        key = override.key_or_group
        if override.is_sweep_override() or override.package is not None or key.startswith("hydra"):
            return None
        if "." in key and not isinstance(override.value(), dict):
            values.append(override)
        else:
            groups.append(line)
    return tuple(groups), values


def make_compose(composing: Any) -> Callable[..., Any]:
    """A compose for module ``vtrain.config.compose`` (its ``compose`` is the real one) with the memo above."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from vtrain.errors import ConfigError

    real = composing.compose
    memo: Dict[Tuple[str, ...], Any] = {}

    def compose(overrides: Optional[Sequence[str]] = None, require: bool = True,
                config_dirs: Sequence[str] = ()) -> Any:
        split = None if config_dirs else _split(overrides or ())
        if split is None:
            return real(overrides, require, config_dirs)
        groups, values = split
        if groups not in memo:
            memo[groups] = real(list(groups), False)
        composing.set_user_config_dirs(())  # what the real call does first: no user config dirs
        cfg = copy.deepcopy(memo[groups])
        try:
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)  # Hydra's second step, as it does it
        except (HydraException, OmegaConfBaseException) as exc:  # as the real compose reports it
            raise ConfigError(str(exc).strip().splitlines()[0]) from None
        return composing.resolve(cfg) if require else cfg

    compose.real = real  # type: ignore[attr-defined]
    return compose
