"""Update fitted constants in ``conf/<group>/<name>.yaml`` in place, keeping the comments around them.

Top-level ``key: value`` lines are replaced (or appended); a mapping value is written as one flow
mapping (``{bf16: 0.9, fp8: 0.8}``); nested keys (``intra_node.latency_s``) are replaced inside their
block; provenance entries are replaced or added under ``provenance:``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Mapping, Union

Value = Union[float, int, str, Mapping[str, Any]]


def provenance_path(path: Path) -> str:
    """A data file as a provenance note names it: relative to the project when inside it, else by its name
    (never a machine's absolute path)."""
    from vtrain.cost.profile_io import project_root

    full, root = path.resolve(), project_root()
    return str(full.relative_to(root)) if full.is_relative_to(root) else full.name


def fmt(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = f"{value:.4g}"
        return text if any(c in text for c in ".e") else text + ".0"
    return f'"{value}"'


def _set_line(text: str, indent: str, key: str, value: Any) -> str:
    line = f"{indent}{key}: {fmt(value)}"
    new, n = re.subn(rf"^{re.escape(indent)}{re.escape(key)}:(?![^\n]*\|)[^\n]*$", line.replace("\\", "\\\\"),
                     text, count=1, flags=re.M)
    if n:
        return new
    prov = re.search(r"^provenance:\s*$", text, flags=re.M)
    if indent == "" and prov:  # a new top-level key goes before the provenance block
        return text[:prov.start()] + line + "\n" + text[prov.start():]
    return text.rstrip("\n") + "\n" + line + "\n"


def _set_nested(text: str, block: str, key: str, value: Any) -> str:
    """Replace ``key`` inside the top-level mapping ``block`` (block style, two-space indent)."""
    m = re.search(rf"^{re.escape(block)}:\s*\n((?:[ ]{{2}}[^\n]*\n?)*)", text, flags=re.M)
    if not m:
        return _set_line(text, "", block, {key: value})
    body = m.group(1)
    new_body = _set_line(body, "  ", key, value)
    if not new_body.endswith("\n"):
        new_body += "\n"
    return text[:m.start(1)] + new_body + text[m.end(1):]


def update_yaml(path: Path, values: Dict[str, Value], provenance: Dict[str, str]) -> None:
    text = path.read_text()
    for key, value in values.items():
        if "." in key:
            block, sub = key.split(".", 1)
            text = _set_nested(text, block, sub, value)
        else:
            text = _set_line(text, "", key, value)
    if provenance:
        if not re.search(r"^provenance:\s*$", text, flags=re.M):
            text = text.rstrip("\n") + "\nprovenance:\n"
        for key, note in provenance.items():
            text = _set_nested(text, "provenance", key, note)
    path.write_text(text if text.endswith("\n") else text + "\n")
