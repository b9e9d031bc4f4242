"""Strict JSON for the files vtrain writes: no bare NaN/Infinity tokens (which are not JSON), non-finite
numbers become null, and the file appears whole or not at all (written next to it, then renamed)."""
from __future__ import annotations

import json
import math
import os
from enum import Enum
from pathlib import Path
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None, tuples as lists, enums as their values and
    numpy scalars as Python numbers."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj.value if isinstance(obj, Enum) else obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Enum):
        return finite(obj.value)
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return finite(obj.item())
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON of ``obj``: serialised directly when every number is finite (the common case, and
    fast for a large trace), else after :func:`finite`."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False, default=finite)  # finite: enums, paths, numpy
    except ValueError:  # a NaN or an infinity somewhere
        return json.dumps(finite(obj), indent=indent, allow_nan=False)


def write_json(path: Path, obj: Any, indent: int | None = 2) -> Path:
    """Write ``obj`` as strict JSON to ``path`` atomically (a reader never sees half a file)."""
    text = dumps(obj, indent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
