"""The config keys the command line may set, read from the schema dataclasses (``VtrainConfig``), with
the type each one takes and the closest valid name for a typo."""
from __future__ import annotations

import dataclasses
import difflib
import typing
from functools import lru_cache
from typing import Any, Dict, List, Optional, Sequence, Tuple

from vtrain.config.schema import VtrainConfig

FREE = object()  # a Dict[str, Any]-like field: any key below it is accepted (checked by its user)


def _unwrap(tp: Any) -> Tuple[Any, bool]:
    """(type without Optional, optional?)."""
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else Any), True
    return tp, False


@lru_cache(maxsize=None)
def schema_keys() -> Dict[str, Tuple[Any, bool]]:
    """Every settable dotted key -> (type, optional). Dataclass fields are walked; the keys below a
    dict-typed field (``extra``, ``case_study.params``, ``gpu.peak_tflops``) map to ``FREE``."""
    out: Dict[str, Tuple[Any, bool]] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp, optional = _unwrap(hints[f.name])
            key = f"{prefix}{f.name}"
            out[key] = (tp, optional)
            if dataclasses.is_dataclass(tp):
                walk(tp, key + ".")  # type: ignore[arg-type]
            elif typing.get_origin(tp) is dict:
                out[key + ".*"] = (FREE, True)

    walk(VtrainConfig, "")
    return out


def lookup(key: str) -> Optional[Tuple[Any, bool]]:
    """The (type, optional) of ``key``, or None when the schema has no such key."""
    keys = schema_keys()
    if key in keys:
        return keys[key]
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) + ".*" in keys:
            return FREE, True
    return None


def closest(name: str, candidates: List[str]) -> Optional[str]:
    """The candidate ``name`` is the first word of (the shortest: ``h100`` is h100_sxm, not v100), else the
    nearest one (difflib ratio >= 0.6), else None."""
    longer = sorted((c for c in candidates if c.lower().startswith(name.lower() + "_")), key=len)
    if name and longer:
        return longer[0]
    best = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return best[0] if best else None


def suggest_key(key: str, extra: Sequence[str] = ()) -> Optional[str]:
    """The valid key nearest to a misspelt one: among its siblings when its parent exists, else among
    all keys (and ``extra`` names, e.g. config groups)."""
    keys = [k for k in schema_keys() if not k.endswith(".*")]
    parent, _, leaf = key.rpartition(".")
    if parent and parent in schema_keys():
        siblings = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == parent]
        hit = closest(leaf, siblings)
        return f"{parent}.{hit}" if hit else None
    return closest(key, keys + list(extra))


def children(key: str) -> List[str]:
    return sorted(k.rpartition(".")[2] for k in schema_keys() if k.rpartition(".")[0] == key and "*" not in k)


_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def type_error(value: Any, tp: Any, optional: bool) -> Optional[str]:
    """Why ``value`` (as Hydra parsed it) cannot be taken by a field of type ``tp``, or None if it can.
    Follows OmegaConf's conversions: an int field takes integers (not 1.5, not true), a float field
    any number, a bool field true/false, a str field scalars."""
    if tp is FREE or tp is Any:
        return None
    if value is None:
        return None if optional else f"must be {_word(tp)} (it cannot be null)"
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            return "must be a list, e.g. [1,2]"
        (item,) = typing.get_args(tp) or (Any,)
        bad = [v for v in value if type_error(v, item, False)]
        return f"must be a list of {_plural(item)} ({bad[0]!r} is not)" if bad else None
    if origin is dict:
        return None if isinstance(value, dict) else "must be a mapping, e.g. {key:value}"
    if dataclasses.is_dataclass(tp):
        return None if isinstance(value, dict) else "is a section: set one of its keys"
    if tp is bool:
        return None if isinstance(value, bool) else f"must be {_word(tp)}"
    if tp is int:
        if isinstance(value, bool) or isinstance(value, (list, dict)):
            return f"must be {_word(tp)}"
        if isinstance(value, float):  # OmegaConf does not narrow 1e3 or 2.0 to an int
            return f"must be {_word(tp)}"
        if isinstance(value, str):
            return None if _parses(value, int) else f"must be {_word(tp)}"
        return None
    if tp is float:
        if isinstance(value, bool) or isinstance(value, (list, dict)):
            return f"must be {_word(tp)}"
        if isinstance(value, str):
            return None if _parses(value, float) else f"must be {_word(tp)}"
        return None
    if tp is str:
        return None if not isinstance(value, (list, dict)) else f"must be {_word(tp)}"
    return None


def _word(tp: Any) -> str:
    return _TYPE_WORDS.get(tp, getattr(tp, "__name__", str(tp)))


def _plural(tp: Any) -> str:
    return {int: "integers", float: "numbers", bool: "booleans", str: "strings"}.get(tp, _word(tp))


def _parses(text: str, conv: Any) -> bool:
    try:
        conv(text)
    except ValueError:
        return False
    return True
