"""One row per evaluated plan (an Optuna trial or a grid point) and the result of a whole search.

The same records feed the printed table, the CSV/plot files and MLflow, whichever sampler ran.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass(frozen=True)
class TrialRecord:
    number: int  # Optuna trial number, or the grid index
    state: str  # COMPLETE | PRUNED | FAIL
    plan: Optional[Dict[str, Any]]  # searched plan fields (None: no plan could be formed)
    values: Optional[Tuple[float, ...]]  # objective values (COMPLETE only)
    metrics: Dict[str, float] = field(default_factory=dict)
    reason: Optional[str] = None  # why it was pruned
    duplicate_of: Optional[int] = None
    violations: Dict[str, float] = field(default_factory=dict)  # search.max_days etc.: > 0 violated (relative)

    @property
    def feasible(self) -> bool:
        return self.state == "COMPLETE" and self.values is not None

    @property
    def satisfies(self) -> bool:
        """Feasible and within every constraint."""
        return self.feasible and all(v <= 0 for v in self.violations.values())

    @property
    def plan_key(self) -> Tuple[Any, ...]:
        return tuple(sorted((self.plan or {}).items()))


@dataclass
class SearchResult:
    model: str
    cluster: str
    sampler: str
    objectives: List[str]
    directions: List[str]
    records: List[TrialRecord]
    front: List[TrialRecord]  # Pareto front of the plans within the constraints, de-duplicated, by 1st objective
    best: Dict[str, TrialRecord]  # "time" (fastest) and "cost" (cheapest) within the constraints
    wall_s: float
    simulations: int
    study_name: Optional[str] = None
    storage: Optional[str] = None
    resumed_trials: int = 0  # finished trials found in the storage at start-up
    stale_failed: int = 0  # RUNNING trials of a killed process this worker took over and finished
    constraints: Any = None  # vtrain.search.constraints.Constraints
    unconstrained_best: Dict[str, TrialRecord] = field(default_factory=dict)  # best plans ignoring constraints
    base_overrides: List[str] = field(default_factory=list)  # to reproduce a plan with task=simulate
    context: Any = None  # the search's vtrain.search.run.Context (evaluator for the best plans' traces)
    optimum: Any = None  # the shape of the optimum (vtrain.search.optimum.Optimum), once the search has ended

    @property
    def feasible(self) -> List[TrialRecord]:
        return [r for r in self.records if r.feasible]

    @property
    def satisfying(self) -> List[TrialRecord]:
        return [r for r in self.records if r.satisfies]

    def pruned_reasons(self) -> Dict[str, int]:
        """Pruned counts by kind of reason (numbers ignored), keyed by the first reason of each kind."""
        first: Dict[str, str] = {}
        out: Dict[str, int] = {}
        for r in self.records:
            if r.state == "PRUNED" and r.reason:
                kind = re.sub(r"\d+(\.\d+)?", "N", r.reason)
                key = first.setdefault(kind, r.reason)
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))
