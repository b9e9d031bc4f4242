"""The bridge between the frozen spec dataclasses of :mod:`vtrain.workload` and the config layer.

- :func:`schema_of` generates a Hydra/OmegaConf schema dataclass (mutable, plain types: enums as their
  string values, nested specs as nested schemas) from a spec class, so each value is defined once;
- :func:`spec_from` builds a spec instance from a plain mapping (a config group as a dict), coercing and
  checking each value and naming the field in a one-line error.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from typing import Any, Dict, Mapping, Optional, Tuple, Type, TypeVar

from omegaconf import MISSING

from vtrain.config.validate import check_choice
from vtrain.errors import ConfigError
from vtrain.workload.fields import check_value

T = TypeVar("T")


@functools.cache
def _hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> Tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def _is_spec(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _plain_type(tp: Any) -> Any:
    """The OmegaConf-friendly type of a spec field's type."""
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return str
    if _is_spec(tp):
        return schema_of(tp)
    return tp


def _plain_default(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


@functools.cache
def _schema_of(cls: type, group: str, name: str, overrides: Tuple[Tuple[str, Any, Any], ...]) -> type:
    hints = _hints(cls)
    over = {k: (t, d) for k, t, d in overrides}
    specs = []
    for f in dataclasses.fields(cls):
        if group and f.metadata.get("group") != group:
            continue
        if f.name in over:
            tp, default = over[f.name]
            specs.append((f.name, tp, dataclasses.field(default=default)))
            continue
        tp = _plain_type(hints[f.name])
        if f.metadata.get("none_means"):
            specs.append((f.name, Optional[tp], dataclasses.field(default=None)))
        elif f.default is not dataclasses.MISSING:
            specs.append((f.name, tp, dataclasses.field(default=_plain_default(f.default))))
        elif f.default_factory is not dataclasses.MISSING:
            factory: Any = tp if _is_spec(hints[f.name]) else f.default_factory
            specs.append((f.name, tp, dataclasses.field(default_factory=factory)))
        else:
            specs.append((f.name, tp, dataclasses.field(default=MISSING)))
    return _importable(dataclasses.make_dataclass(name, specs))


def _importable(schema: type) -> type:
    """Give a generated schema a unique name in this module, so that pickle (and cloudpickle, which the
    SLURM/submitit launchers use to ship the config loader to a job) refers to it by name. Pickled by
    value, its fields' ``dataclasses.MISSING`` sentinels become other objects and OmegaConf reads a
    ``default_factory`` field as a default of type _MISSING_TYPE ("Cannot assign _MISSING_TYPE to
    Dict[str, str]" in the job). A job that unpickles a name first builds the schemas (``__getattr__``)."""
    name, i = schema.__name__, 1
    while name in _SCHEMAS and _SCHEMAS[name] is not schema:
        i += 1
        name = f"{schema.__name__}_{i}"
    schema.__module__, schema.__qualname__ = __name__, name
    _SCHEMAS[name] = schema
    globals()[name] = schema
    return schema


_SCHEMAS: Dict[str, type] = {}


def __getattr__(name: str) -> Any:  # a schema named in a pickle: build the schemas, then look it up
    if name.startswith("__"):
        raise AttributeError(name)
    import vtrain.config.schema  # noqa: F401  (registers every schema)

    if name in _SCHEMAS:
        return _SCHEMAS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def schema_of(cls: type, group: str = "", name: str = "", overrides: Optional[Mapping[str, Tuple[Any, Any]]] = None
              ) -> type:
    """The config schema of spec ``cls`` (only the fields of config ``group`` when given); ``overrides``
    replaces a field's (type, default), e.g. a nested spec that the config names by a string."""
    items = tuple((k, t, d) for k, (t, d) in (overrides or {}).items())
    default_name = cls.__name__.replace("Spec", "").replace("Plan", "") + "Config"
    return _schema_of(cls, group, name or default_name, items)


def _coerce(label: str, raw: Any, tp: Any) -> Any:
    # the common cases first: a value that already has its field's plain type
    if tp is float and type(raw) is float:
        return raw
    if (tp is int and type(raw) is int) or (tp is bool and type(raw) is bool) or (tp is str and type(raw) is str):
        return raw
    origin = typing.get_origin(tp)
    if origin is typing.Union:  # Optional[X]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if raw is None else _coerce(label, raw, args[0])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        check_choice(label, raw, [e.value for e in tp])
        return tp(str(raw))
    if _is_spec(tp):
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{label} must be a mapping of {', '.join(f.name for f in dataclasses.fields(tp))}")
        return spec_from(tp, raw, label)
    if tp is bool:
        if not isinstance(raw, bool):
            raise ConfigError(f"{label}={raw}: must be true or false")
        return raw
    if tp is int:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != raw or raw in (float("inf"), -float(
                "inf")) or int(raw) != raw:
            raise ConfigError(f"{label}={raw}: must be an integer")
        return int(raw)
    if tp is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(f"{label}={raw}: must be a number")
        return float(raw)
    if tp is str:
        if raw is None:
            raise ConfigError(f"{label} is not set")
        return str(raw)
    if origin in (dict, typing.Dict, Mapping):
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{label} must be a mapping")
        _, vt = typing.get_args(tp)
        return {str(k): _coerce(f"{label}.{k}", v, vt) for k, v in raw.items()}
    return raw


def spec_from(cls: Type[T], data: Mapping[str, Any], prefix: str, group: str = "", **given: Any) -> T:
    """An instance of spec ``cls`` from a plain mapping: each value coerced to its field's type and
    checked against its domain; absent keys take the spec's default; ``given`` fields are taken as they
    are (e.g. an already built nested spec). Errors name ``prefix.field``."""
    hints = _hints(typing.cast(type, cls))
    kwargs: Dict[str, Any] = {}
    for f in _fields(typing.cast(type, cls)):
        if f.name in given:
            kwargs[f.name] = given[f.name]
            continue
        if group and f.metadata.get("group") != group:
            continue
        label = f"{prefix} {f.name}" if prefix.endswith(":") else f"{prefix}.{f.name}"
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{label} is not set")
            continue
        value = _coerce(label, data[f.name], hints[f.name])
        domain = f.metadata.get("domain")
        if domain is not None and value is not None:
            if isinstance(value, dict):
                for k, v in value.items():
                    check_value(f"{label}.{k}", v, domain)
            else:
                check_value(label, value, domain)
        kwargs[f.name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field left out by ``group``
        raise ConfigError(f"{prefix}: {exc}") from None
