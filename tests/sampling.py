"""The fast loop's sample of a long parametrized table: every case runs in CI (``pytest`` runs the slow ones too);
the fast loop (``-m "not slow"``) runs every ``every``-th case from the first, so a change that breaks the table
as a whole fails in seconds and one that breaks a single case fails in CI. Used where each case runs the whole
command line (Hydra composes, writes a run directory) at ~0.5 s of CPU."""
from __future__ import annotations

from typing import Any, Iterable, List

import pytest
from _pytest.mark.structures import ParameterSet


def fast_every(every: int, cases: Iterable[Any]) -> List[Any]:
    """``cases`` (tuples, single values or ``pytest.param``), the ones off the stride marked slow."""
    out = []
    for i, case in enumerate(cases):
        if i % every == 0:
            out.append(case)
            continue
        if isinstance(case, ParameterSet):
            out.append(pytest.param(*case.values, marks=[*case.marks, pytest.mark.slow], id=case.id))
        else:
            out.append(pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow))
    return out
