"""The run a report assumed: tokens, sequence length and batch (a model's published run, training/<preset>.yaml,
or the command line's), the price list, and goodput. ``task=simulate`` and ``task=search`` print these lines and
write :func:`run_dict` into their outputs; a model without a published run must be given its tokens."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from vtrain.config.compose import group_options
from vtrain.errors import ConfigError

RUN_KEYS = ("tokens_to_train", "seq_len", "global_batch_size")
DAY_S = 86400.0


def _given_on_command_line() -> Optional[Set[str]]:
    """The ``training.*`` keys the command line set (plus ``experiment`` when an experiment was selected, as it sets
    its own run); None outside a Hydra run (the Python API, which keeps training/default.yaml's values)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except Exception:  # not inside a Hydra run
        return None
    given = {o.split("=", 1)[0].lstrip("+~").removeprefix("training.") for o in hc.overrides.task
             if o.lstrip("+~").startswith("training.")}
    if hc.runtime.choices.get("experiment"):
        given.add("experiment")
    return given


def require_run(cfg: Any) -> None:
    """A model with no published run (no ``training.source``) must be given ``training.tokens_to_train`` on the
    command line: a GPT-3 run silently assumed for another model is off by its tokens (40x for Llama 3)."""
    if str(cfg.training.get("source") or ""):
        return
    given = _given_on_command_line()
    if given is None or "tokens_to_train" in given or "experiment" in given:
        return
    presets = [p for p in group_options("training") if p != "default"]
    raise ConfigError(f"training.tokens_to_train=unset: model={cfg.model.name} has no published training run; give "
                      "training.tokens_to_train=<tokens> (and training.seq_len, training.global_batch_size) or a run "
                      f"training=<{'|'.join(presets)}>")


def _tokens(n: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:,.0f}"


def run_dict(cfg: Any) -> Dict[str, Any]:
    """The run and price a report assumed, with their sources (report.json's ``run``)."""
    t, p = cfg.training, cfg.pricing
    gpu = str(cfg.gpu.name) if cfg.get("gpu") is not None else str(cfg.cluster.gpu)
    given = sorted((_given_on_command_line() or set()) & set(RUN_KEYS))
    estimates = dict(p.get("estimates") or {})
    return {
        "tokens_to_train": float(t.tokens_to_train), "seq_len": int(t.seq_len),
        "global_batch_size": int(t.global_batch_size),
        "source": str(t.get("source") or "") or "training/default.yaml (no published run of this model)",
        "given_on_command_line": given,
        "pricing": {"name": str(p.name), "kind": str(p.get("kind") or ""), "date": str(p.get("date") or ""),
                    "source": str(p.get("source") or ""), "gpu": gpu,
                    "usd_per_gpu_hour": float((p.get("usd_per_gpu_hour") or {}).get(gpu, 0.0)),
                    "estimate": estimates.get(gpu), "include_energy": bool(p.get("include_energy", False)),
                    "usd_per_kwh": float(p.get("usd_per_kwh", 0.0))}}


def run_lines(cfg: Any) -> List[str]:
    """Two lines: the run (tokens, sequence, batch, source) and the price (its list, kind, date; an estimate said)."""
    d = run_dict(cfg)
    tokens_per_step = d["seq_len"] * d["global_batch_size"]
    given = f"; from the command line: {', '.join('training.' + k for k in d['given_on_command_line'])}" \
        if d["given_on_command_line"] else ""
    run = (f"run: {_tokens(d['tokens_to_train'])} tokens, sequences of {d['seq_len']:,}, "
           f"batch {d['global_batch_size']:,} ({_tokens(tokens_per_step)} tokens); {d['source']}{given}")
    pr = d["pricing"]
    when = ", ".join(x for x in (pr["kind"], pr["date"]) if x)
    price = (f"price: ${pr['usd_per_gpu_hour']:.2f} per {pr['gpu']} GPU-hour, pricing={pr['name']}"
             f"{f' ({when})' if when else ''}: {pr['source']}")
    if pr["estimate"]:
        price += f"; ESTIMATE: {pr['estimate']}"
    if pr["include_energy"]:
        price += f"; energy at ${pr['usd_per_kwh']:.4f}/kWh included in the cost"
    return [run, price]


def goodput_line(report: Any) -> str:
    """Goodput and the expected time and cost with failures, beside the failure-free figures."""
    if report.expected_time_to_train_s <= 0:
        return "goodput: not computed"
    every_h = report.expected_time_to_train_s / 3600 / report.expected_failures if report.expected_failures else 0.0
    failures = (f"~{report.expected_failures:,.0f} failures (one every {every_h:,.1f} h on {report.gpus_used:,} GPUs)"
                if report.expected_failures else "no failures (zero failure rates)")
    return (f"goodput: {report.goodput:.1%}: {failures}, a {report.checkpoint_write_s:,.0f} s checkpoint every "
            f"{report.checkpoint_interval_s / 60:,.0f} min (Young/Daly); expected "
            f"{report.expected_time_to_train_s / DAY_S:,.1f} days, ${report.expected_cost_usd:,.0f} (failure-free: "
            f"{report.time_to_train_s / DAY_S:,.1f} days, "
            f"${report.cost_usd:,.0f})")


GOODPUT_NOTE = ("times and costs are expected figures: failures, restarts and checkpoints included (goodput, "
                "vtrain/sim/goodput.py); cluster.gpu_failures_per_h=0 cluster.node_failures_per_h=0 ranks failure-free")
