"""One definition of each input value: a spec field carries its unit, meaning, domain and config group.

The frozen spec dataclasses of :mod:`vtrain.workload` declare their fields with :func:`spec`; the Hydra
schemas are generated from them (:mod:`vtrain.config.schema`) and every numeric value is checked against
its :class:`Domain` in one place (:func:`check_spec`), so adding a constant is one line of Python and one
line of YAML.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Optional

from vtrain.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Domain:
    """The values a number may take: finite, within [lo, hi] (open ends with ``lo_open``/``hi_open``);
    ``why``: the reason for the range (its source), said after the rule when a value breaks it."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    why: str = ""

    def rule(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"must be {kind} in {left}{_num(self.lo)}, {_num(self.hi)}{right}"
        if self.lo is not None:
            return f"must be {kind} {'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"must be {kind} {'<' if self.hi_open else '<='} {_num(self.hi)}"
        return f"must be {kind}"

    def reason(self) -> str:
        """The rule and, where there is one, why: ``must be an integer in [1, 10000] (the deepest ...)``."""
        return f"{self.rule()} ({self.why})" if self.why else self.rule()

    def admits(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.integer and value != int(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return False
        return True


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) <= 2**40 else f"{x:g}"


POSITIVE = Domain(lo=0.0, lo_open=True, why="a positive amount")
NON_NEGATIVE = Domain(lo=0.0, why="a factor or amount, 0 for none")
FRACTION = Domain(lo=0.01, hi=1.0, why="an efficiency: below 1% is no longer a physical GPU")
PROBABILITY = Domain(lo=0.0, hi=1.0, hi_open=True)  # 0 <= x < 1
POSITIVE_INT = Domain(lo=1.0, integer=True)
NON_NEGATIVE_INT = Domain(lo=0.0, integer=True)


def spec(default: Any = MISSING, *, unit: str = "", doc: str = "", domain: Optional[Domain] = None,
         group: str = "", none_means: str = "", factory: Any = MISSING) -> Any:
    """A spec field. ``unit``: SI or binary unit of the value (also in the name); ``doc``: what it means;
    ``domain``: the numbers it admits (checked by :func:`check_spec`); ``group``: the config group that
    holds it when a spec spans groups; ``none_means``: the config may leave it empty (None), meaning this
    (the builder fills it in)."""
    meta = {"unit": unit, "doc": doc, "domain": domain, "group": group, "none_means": none_means}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def domain_of(cls: type, name: str) -> Optional[Domain]:
    for f in fields(cls):
        if f.name == name:
            d = f.metadata.get("domain")
            return d if isinstance(d, Domain) else None
    return None


def check_value(label: str, value: Any, domain: Domain) -> None:
    """One line ``<label>=<value>: <rule> (<why>)`` where ``value`` is outside ``domain``."""
    if not domain.admits(value):
        raise ConfigError(f"{label}={value}: {domain.reason()}")


def check_spec(obj: Any, prefix: str) -> None:
    """Check every field of a spec instance against its declared domain (mappings of numbers: each value)."""
    for f in fields(obj):
        d = f.metadata.get("domain")
        if not isinstance(d, Domain):
            continue
        value = getattr(obj, f.name)
        if isinstance(value, dict):
            for k, v in value.items():
                check_value(f"{prefix}.{f.name}.{k}", v, d)
        elif value is not None:
            check_value(f"{prefix}.{f.name}", value, d)
