"""One job per file: no source file over 400 lines and no function over 80 (tests aside), read with ``ast``.

A file or function still over its limit is listed in ``ALLOWED`` with the size it has today and why it is not
split yet. The list may only shrink: an entry that grew fails, and so does an entry that is no longer over the
limit (take it off the list).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, Tuple

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("vtrain", "bench", "sweeps")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80

# "path" (a file's lines) or "path:function" (a function's lines) -> (lines today, reason)
ALLOWED: Dict[str, Tuple[int, str]] = {}


def sizes() -> Dict[str, int]:
    """Every file over ``MAX_FILE_LINES`` and every function over ``MAX_FUNCTION_LINES`` -> its lines."""
    out: Dict[str, int] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text()
            rel = path.relative_to(ROOT).as_posix()
            if text.count("\n") > MAX_FILE_LINES:
                out[rel] = text.count("\n")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        out[f"{rel}:{node.name}"] = max(lines, out.get(f"{rel}:{node.name}", 0))
    return out


def test_the_checker_sees_a_long_function_and_a_long_file(tmp_path, monkeypatch):
    pkg = tmp_path / "vtrain"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"def f():\n{body}\n" + "\n" * MAX_FILE_LINES)
    (pkg / "short.py").write_text("def g():\n    return 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert sizes() == {"vtrain/long.py": MAX_FUNCTION_LINES + 1 + MAX_FILE_LINES,
                       "vtrain/long.py:f": MAX_FUNCTION_LINES + 1}


def test_no_file_or_function_over_its_limit_but_the_listed_ones():
    over = sizes()
    new = {k: v for k, v in over.items() if k not in ALLOWED}
    assert not new, f"split these (files <= {MAX_FILE_LINES} lines, functions <= {MAX_FUNCTION_LINES}): {new}"


def test_the_allow_list_only_shrinks():
    over = sizes()
    grown = {k: (over[k], ALLOWED[k][0]) for k in ALLOWED if over.get(k, 0) > ALLOWED[k][0]}
    assert not grown, f"(now, listed) lines: these grew; split them instead: {grown}"
    done = sorted(k for k in ALLOWED if k not in over)
    assert not done, f"within the limit now: take them off ALLOWED: {done}"
