"""Shared test helper: a workload's report from the extrapolated pipeline run and from the full event run."""
from vtrain.api import cost_model_for
from vtrain.sim import simulator
from vtrain.sim.simulator import simulate_workload


def extrapolated_and_full(w):
    """(extrapolated, full) reports of one workload (``simulate_pipeline(full=True)`` simulates every task)."""
    cm = cost_model_for(w)
    fast, _ = simulate_workload(w, cm)
    orig = simulator.simulate_pipeline
    try:
        simulator.simulate_pipeline = lambda *a, **k: orig(*a, **{**k, "full": True})
        full, _ = simulate_workload(w, cm)
    finally:
        simulator.simulate_pipeline = orig
    return fast, full
