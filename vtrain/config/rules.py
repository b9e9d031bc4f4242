"""Rules for config groups that are not specs (``search.*``, ``tracking.*``, ``profile.*``): each rule is data
(field, predicate, rule text), so a bad value gives one line naming the field and the rule, e.g.
``search.population_size=1: must be an integer from 2 to 100000``, raised as :class:`vtrain.errors.ConfigError`
(the CLI prints it and exits 2)."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Tuple

from vtrain.errors import ConfigError

Rule = Tuple[str, Callable[[Any], bool], str]


def int_in(lo: int, hi: Optional[int] = None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)


def num_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[Any], bool]:
    def ok(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (v > lo if lo_open else v >= lo) and v <= hi
    return ok


def optional(pred: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or pred(v)


def list_of(pred: Callable[[Any], bool], empty: bool = False) -> Callable[[Any], bool]:
    """A list whose items all pass ``pred``; non-empty unless ``empty``."""
    return lambda v: isinstance(v, (list, tuple)) and (empty or len(v) > 0) and all(pred(x) for x in v)


def one_of(choices: Sequence[str]) -> Callable[[Any], bool]:
    return lambda v: str(v) in choices


def boolean(v: Any) -> bool:
    return isinstance(v, bool)


def text(v: Any) -> bool:
    """None or a non-blank string."""
    return v is None or (isinstance(v, str) and v.strip() != "")


def _plain(value: Any) -> Any:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    return value


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return "null" if value is None else str(value)


def check_group(group: str, node: Any, rules: Sequence[Rule]) -> None:
    for name, ok, rule in rules:
        value = _plain(node.get(name) if hasattr(node, "get") else getattr(node, name, None))
        if not ok(value):
            raise ConfigError(f"{group}.{name}={_show(value)}: {rule}")
