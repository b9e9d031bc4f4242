"""task=measure: predict a single-device training iteration from the device's profile, then run it.

    python -m vtrain task=measure +model=tiny profile.device=cpu training.seq_len=128 \\
        parallelism.micro_batch_size=2 cost.profile_dir=<profile folder or root>

The plan is forced to one device (tp=pp=dp=1, no recompute, no sequence parallelism) and the global
batch to micro_batch_size x profile.grad_accum_steps; the precision is the profile dtype. The
measured model is :class:`vtrain.profiler.model.TransformerLM` (plain PyTorch), trained with
gradient accumulation and Adam; its median iteration time is printed next to the prediction.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Dict

from omegaconf import DictConfig, OmegaConf, open_dict

from vtrain.cli.logs import say
from vtrain.config.compose import CONF_DIR, resolve
from vtrain.errors import ConfigError


def _ensure_cluster(cfg: DictConfig, device_type: str) -> None:
    if not OmegaConf.is_missing(cfg, "cluster") and cfg.get("cluster") is not None:
        return
    if device_type != "cpu":
        raise ConfigError("task=measure on cuda: add +cluster=<name> (its gpu config must match the profile)")
    from vtrain.config.schema import ClusterConfig

    with open_dict(cfg):
        cfg.cluster = OmegaConf.merge(OmegaConf.structured(ClusterConfig),
                                      OmegaConf.load(CONF_DIR / "cluster" / "local_cpu.yaml"))


def single_device(cfg: DictConfig, dtype: str, accum: int) -> None:
    """The plan task=measure runs: one device, no recompute, gbs = mbs x accum, profile cost model."""
    with open_dict(cfg):
        cfg.training.precision = dtype
        cfg.parallelism.tp = cfg.parallelism.pp = cfg.parallelism.dp = 1
        cfg.parallelism.schedule = "1f1b"
        cfg.parallelism.virtual_stages = 1
        cfg.parallelism.recompute = "none"
        cfg.parallelism.sequence_parallel = False
        cfg.parallelism.distributed_optimizer = False
        cfg.training.global_batch_size = int(cfg.parallelism.micro_batch_size) * accum
        cfg.cost.model = "profile"


def run(cfg: DictConfig, out_dir: Path) -> int:
    from vtrain.cli.task_profile import profile_dtype

    p = cfg.profile
    if str(p.device) == "none":
        raise ConfigError("task=measure needs profile.device=cpu or cuda")
    from vtrain.profiler.settings import check_profile

    check_profile(p)
    import torch

    from vtrain.api import simulate
    from vtrain.config.build import build_workload
    from vtrain.cost.profile_io import find_profile
    from vtrain.io.labels import fmt_duration
    from vtrain.profiler.device import device_name, torch_device, torch_dtype
    from vtrain.profiler.model import measure_training

    dev = torch_device(str(p.device))
    _ensure_cluster(cfg, dev.type)
    resolve(cfg)
    dtype = profile_dtype(cfg, dev.type)
    accum = int(p.grad_accum_steps)
    if accum < 1:
        raise ConfigError(f"profile.grad_accum_steps={accum} must be a positive number")
    single_device(cfg, dtype, accum)
    if int(p.threads) > 0 and dev.type == "cpu":
        torch.set_num_threads(int(p.threads))
    w = build_workload(cfg)
    profile = find_profile(cfg, required=True)
    assert profile is not None  # required=True raises instead of returning None
    report = simulate(cfg, profile=profile)
    plan = w.plan
    name = device_name(dev)
    say(f"vtrain measure: {w.model.name} ({w.model.num_layers} layers, hidden {w.model.hidden_size}) on {name} "
        f"({dev}, {dtype}); micro-batch {plan.micro_batch_size} x {plan.num_microbatches}, seq {plan.seq_len}, "
        f"{'flash' if plan.flash_attention else 'unfused'} attention")
    b = report.breakdown
    say(f"predicted: {fmt_duration(report.iteration_time_s)}  (profile {Path(profile.meta.path).name}: "
        f"compute {fmt_duration(b.compute_s)}, optimizer {fmt_duration(b.optimizer_s)}, "
        f"host {fmt_duration(b.host_overhead_s)})")
    if report.extrapolated_ops:
        say(f"  extrapolated outside the profile: {', '.join(report.extrapolated_ops)}")
    clock = str(profile.meta.raw.get("timing", {}).get("clock", "wall")) if dev.type == "cpu" else "wall"
    clock = clock if clock in ("cpu", "wall") else "wall"
    run_ = measure_training(w.model, plan.micro_batch_size, plan.seq_len, plan.num_microbatches, dev,
                            torch_dtype(dtype), plan.flash_attention, int(p.warmup), int(p.measure_iterations), clock)
    t = run_.timing
    err = report.iteration_time_s / t.median_s - 1.0
    say(f"measured:  {fmt_duration(t.median_s)}  ({clock} clock as the profile; median of {t.samples} iterations "
        f"after {max(1, int(p.warmup))} warm-up; p10 {fmt_duration(t.p10_s)}, p90 {fmt_duration(t.p90_s)}, "
        f"spread {t.spread:.1%}; wall clock median {fmt_duration(run_.wall.median_s)})")
    say(f"error: {err:+.1%} (predicted / measured - 1); loss {run_.loss:.3f}; {run_.params:,} parameters")
    result: Dict[str, Any] = {
        "model": w.model.name, "num_layers": w.model.num_layers, "hidden_size": w.model.hidden_size,
        "num_heads": w.model.num_heads, "vocab_size": w.model.vocab_size, "micro_batch_size": plan.micro_batch_size,
        "microbatches": plan.num_microbatches, "seq_len": plan.seq_len, "dtype": dtype, "device": dev.type,
        "device_name": name, "flash_attention": plan.flash_attention, "params": run_.params,
        "predicted_s": report.iteration_time_s, "measured_s": t.median_s, "measured_p10_s": t.p10_s,
        "measured_p90_s": t.p90_s, "measured_wall_s": run_.wall.median_s, "clock": clock,
        "iterations": t.samples, "error": err, "profile": profile.meta.path,
        "extrapolated_ops": list(report.extrapolated_ops)}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "measure.json").write_text(json.dumps(result, indent=2) + "\n")
    if p.get("validation_csv"):
        path = Path(str(p.validation_csv))
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=list(result))
            if new:
                wr.writeheader()
            wr.writerow({k: ";".join(v) if isinstance(v, list) else v for k, v in result.items()})
        say(f"appended to {path}")
    return 0
