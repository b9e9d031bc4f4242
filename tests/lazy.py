"""A module (or one of its names) imported on first use, for test files whose tests need torch: every pytest worker
collects every test file, so a torch import at a test file's top costs each worker ~1.9 s of CPU on every run,
even where none of its tests runs there (the fast loop sends them all to one worker: ``xdist_group("torch")``)."""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest


class Lazy:
    """``module`` (``Lazy("torch")``) or ``module.name`` (``Lazy("vtrain.profiler.scaled_gemm", "Recipe")``),
    imported when an attribute is read or it is called."""

    def __init__(self, module: str, name: str = "") -> None:
        self._module, self._name, self._target = module, name, None

    def _get(self) -> Any:
        if self._target is None:
            mod = importlib.import_module(self._module)
            self._target = getattr(mod, self._name) if self._name else mod
        return self._target

    def __getattr__(self, attr: str) -> Any:
        if attr in ("_module", "_name", "_target"):  # not set yet (a copy being made): no recursion
            raise AttributeError(attr)
        return getattr(self._get(), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._get()(*args, **kwargs)


def needs_torch() -> list:
    """The ``pytestmark`` of a test file whose tests need torch: skipped without it, and run on one worker."""
    return [pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
            pytest.mark.xdist_group("torch")]
