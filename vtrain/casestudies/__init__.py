"""The vTrain paper's three case studies as ready, config-driven sweeps (``task=casestudy``):

- ``parallelization``: every (t, d, p) plan of MT-NLG 530B vs the published plan (time, cost, memory);
- ``scheduling``: a multi-tenant GPU cluster, heuristic vs vtrain-guided allocation (Gantt chart);
- ``compute_optimal``: model sizing under a GPU-hour budget and a deadline, Chinchilla loss, fixed MFU
  vs vtrain's predicted throughput.

Each study is ``run_study(cfg, workload, cost_model) -> StudyResult`` plus a plot function.
"""
from __future__ import annotations

import importlib
from typing import Callable, Dict, Tuple

# name -> (module with run_study, plot function name in vtrain.casestudies.plots)
STUDIES: Dict[str, Tuple[str, str]] = {
    "parallelization": ("vtrain.casestudies.parallelization", "plot_parallelization"),
    "scheduling": ("vtrain.casestudies.scheduling", "plot_scheduling"),
    "compute_optimal": ("vtrain.casestudies.sizing", "plot_sizing"),
}


def study(name: str) -> Tuple[Callable, Callable]:
    """(run_study, plot) of a study name; ConfigError for an unknown one."""
    from vtrain.errors import ConfigError

    if name not in STUDIES:
        raise ConfigError(f"case_study.name={name} is not one of {', '.join(STUDIES)}")
    mod, plot = STUDIES[name]
    from vtrain.casestudies import plots

    return importlib.import_module(mod).run_study, getattr(plots, plot)
