"""The test session's memo of Hydra's own composition steps, for the composes that go to Hydra itself: the
in-process command-line runs (``python -m vtrain ...`` as ``vtrain.cli.main.main``), which compose twice each
(``Hydra.get_mode`` in MULTIRUN mode, then the run), and what tests/composecache.py sends on to Hydra.

Hydra's ``ConfigLoaderImpl._load_configuration_impl`` builds a config in steps; two of them are pure functions of
their arguments and of the config files, and cost ~85% of a compose (they read and merge ~24 YAML files):

1. ``create_defaults_list(repo, config_name, overrides, prepend_hydra, skip_missing)``: the defaults list the
   command line chooses. Its defaults follow the group choices only; the command line's config overrides
   (``parallelism.tp=8``, and the ``hydra.mode=RUN`` Hydra adds for the run) are only carried in it, for the
   next step to apply. So the list is kept per (config name, override lines that are not config overrides,
   prepend_hydra, config sources), Hydra's own ``Overrides`` telling which are, and handed out with this
   command line's config overrides. ``skip_missing`` (True in MULTIRUN mode) only lets a ``???`` group choice
   pass (``defaults_list._check_not_missing``): the memo computes the strict list, and where that fails it is
   not kept and Hydra's call (with the caller's ``skip_missing``) answers; where it succeeds no ``???`` was met,
   so the lenient list is the same. So ``get_mode``'s compose and the run's share one list, and so do command
   lines that choose the same groups.
2. ``ConfigLoaderImpl._compose_config_from_defaults_list(defaults, repo)``: the merged config of a defaults list.
   Kept per (defaults list, config sources); each caller gets a deep copy (Hydra then applies the value
   overrides and its own bookkeeping to it).

Everything else (override parsing, sweep checks, value overrides, ``hydra.*`` runtime fields, callbacks) runs as
Hydra runs it. Only composes whose config sources are all shipped (vtrain's ``conf``, Hydra's and its plugins'
``pkg://`` packages, structured configs) are kept: a ``--config-dir`` folder, whose files a test may rewrite,
goes to Hydra each time; a failure is never kept. tests/unit/test_compose_memo.py checks that a command line's
config equals Hydra's fresh one (value, ``+``, ``~``, ``hydra.*``, sweep and group overrides, both run modes) and
that errors are Hydra's; VTRAIN_TEST_FRESH_COMPOSE=1 turns it off with the rest.
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

Key = Tuple[Any, ...]


def _sources(repo: Any, shipped_dir: str) -> Optional[Tuple[Tuple[str, str], ...]]:
    """The repo's config sources as a key, or None where one may change under the session (a user folder)."""
    key = []
    for source in repo.get_sources():
        scheme, path = source.scheme(), str(source.path)
        if scheme == "file" and not str(Path(path).resolve()).startswith(shipped_dir):
            return None
        if scheme not in ("file", "pkg", "structured"):
            return None
        key.append((scheme, path))
    return tuple(key)


def install(shipped_dir: str) -> None:
    """Wrap Hydra's two steps in this process (configs under ``shipped_dir`` and Hydra's packages are kept)."""
    from hydra._internal import config_loader_impl as cli
    from hydra._internal.defaults_list import Overrides
    from hydra.errors import ConfigCompositionException

    real_defaults = cli.create_defaults_list
    real_merge = cli.ConfigLoaderImpl._compose_config_from_defaults_list
    defaults_memo: Dict[Key, Any] = {}
    merge_memo: Dict[Key, Any] = {}

    def create_defaults_list(repo: Any, config_name: Optional[str], overrides_list: Any, prepend_hydra: bool,
                             skip_missing: bool) -> Any:
        sources = _sources(repo, shipped_dir)
        if sources is None:
            return real_defaults(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        try:  # Hydra's own split of the command line: config overrides (values) and the rest (group choices)
            values = Overrides(repo=repo, overrides_list=overrides_list).config_overrides
        except Exception:  # Hydra raises it again, with its message
            return real_defaults(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        chosen = {id(o) for o in values}
        key = (config_name, tuple(o.input_line for o in overrides_list if id(o) not in chosen), prepend_hydra, sources)
        if key not in defaults_memo:
            try:
                defaults_memo[key] = real_defaults(repo, config_name, overrides_list, prepend_hydra, False)
            except (ConfigCompositionException, ValueError):  # a ??? choice, or Hydra's own error: Hydra answers
                return real_defaults(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        kept = defaults_memo[key]
        return dataclasses.replace(kept, defaults=list(kept.defaults), config_overrides=list(values))

    def compose_from_defaults(self: Any, defaults: Any, repo: Any) -> Any:
        sources = _sources(repo, shipped_dir)
        if sources is None:
            return real_merge(self, defaults, repo)
        key = (repr(defaults), sources)
        if key not in merge_memo:
            merge_memo[key] = real_merge(self, defaults, repo)
        return copy.deepcopy(merge_memo[key])

    create_defaults_list.real = real_defaults  # type: ignore[attr-defined]
    compose_from_defaults.real = real_merge  # type: ignore[attr-defined]
    cli.create_defaults_list = create_defaults_list
    cli.ConfigLoaderImpl._compose_config_from_defaults_list = compose_from_defaults  # type: ignore[method-assign]
