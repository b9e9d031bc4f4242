"""Workload: the model (ModelSpec) and the plan (ParallelPlan) built from a validated config."""
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

__all__ = ["ModelSpec", "ParallelPlan"]
