"""Names and parameters of vtrain's MLflow runs, shared by ``task=search`` and ``task=simulate``.

- Experiment: ``tracking.experiment_name`` if given; in a Hydra multirun (``-m``) one experiment per sweep,
  ``vtrain-sweep-<sweep directory>`` (every job of a sweep shares that directory), so a 2x2 sweep of models
  and clusters lands in one experiment; otherwise ``vtrain-<model>-<cluster>``. No ``/`` (the UI reads it
  as a path).
- Parent params: what was chosen (the model, cluster, training run, prices, the search's settings and every
  override given on the command line), not the whole resolved config (that is the ``config.yaml`` artifact).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

# the run a plan is simulated for and what prices it: named in every parent run, whether given or defaulted
CHOSEN = ("model.name", "cluster.name", "training.tokens_to_train", "training.seq_len", "training.global_batch_size",
          "training.precision", "stack.name", "pricing.name")
CHOSEN_SEARCH = ("search.sampler", "search.n_trials", "search.seed", "search.objectives", "search.objective_quantile")


def _hydra() -> Any:
    """Hydra's config of this run, or None (the compose API, tests)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get()
    except Exception:  # not inside a Hydra run
        return None


def _multirun(hc: Any) -> bool:
    return hc is not None and getattr(getattr(hc, "mode", None), "name", "") == "MULTIRUN"


def _clean(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-")


def sweep_name() -> Optional[str]:
    """``vtrain-sweep-<the sweep directory's last two parts>`` inside a Hydra multirun job
    (``vtrain-sweep-2026-12-07-00-45-07`` for the default ``outputs/multirun/<date>/<time>``), else None."""
    hc = _hydra()
    if not _multirun(hc):
        return None
    parts = [p for p in Path(str(hc.sweep.dir)).parts if p not in ("/", ".", "outputs", "multirun")]
    return "vtrain-sweep-" + (_clean("-".join(parts[-2:])) or "sweep")  # the default's date and time


def job_label() -> str:
    """`` job <n>`` inside a multirun job (its number in the sweep), else empty."""
    hc = _hydra()
    if not _multirun(hc):
        return ""
    return f" job {hc.job.num}"


def experiment_for(tracking: Any, model: str, cluster: str) -> str:
    given = tracking.get("experiment_name") if hasattr(tracking, "get") else getattr(tracking, "experiment_name", None)
    return str(given or sweep_name() or f"vtrain-{model}-{cluster}")


def given_overrides() -> List[str]:
    """The overrides of this run's command line (a multirun job: its own), or none without Hydra."""
    hc = _hydra()
    if hc is None:
        return []
    return [str(o) for o in hc.overrides.task]


def chosen_params(cfg: Any, search: bool = True) -> Dict[str, str]:
    """The parent run's params: :data:`CHOSEN` (and :data:`CHOSEN_SEARCH`) from the resolved config, then every
    ``key=value`` given on the command line (``+model=gpt175b`` as ``model``)."""
    from omegaconf import OmegaConf

    out: Dict[str, str] = {}
    for key in CHOSEN + (CHOSEN_SEARCH if search else ()):
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None:
            out[key] = str(OmegaConf.to_container(value) if OmegaConf.is_config(value) else value)
    for o in given_overrides():
        key, eq, value = o.lstrip("+~").partition("=")
        if eq and key.split(".")[0] != "hydra" and f"{key}.name" not in out:  # +model=x is model.name
            out.setdefault(key, value)
    return out
