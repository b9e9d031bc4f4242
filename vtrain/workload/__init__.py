"""Workload: the typed inputs of one simulation (model, plan, cluster), built from a validated config."""
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

__all__ = ["ModelSpec", "ParallelPlan", "Workload"]
