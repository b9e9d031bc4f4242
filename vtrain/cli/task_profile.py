"""task=profile: time the simulator's ops on this machine and write ``profiles/<device>/``.

    python -m vtrain task=profile +model=tiny profile.device=cpu
    python -m vtrain task=profile +model=gpt_1_7b +cluster=h200x8 profile.device=cuda profile.dtype=bf16
    python -m vtrain task=profile +model=tiny profile.import_nccl=shared/data/nccl_allreduce/a100 ...

Schema of the written files: profiles/README.md.
"""
from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any, Dict, List

from omegaconf import DictConfig, OmegaConf

from vtrain.cli.logs import say
from vtrain.config.compose import require_group
from vtrain.errors import ConfigError, ProfileError
from vtrain.workload.model import ModelSpec


def profile_dtype(cfg: DictConfig, device_type: str) -> str:
    """profile.dtype; else fp32 on CPU and training.precision on CUDA."""
    if cfg.profile.get("dtype"):
        return str(cfg.profile.dtype)
    return "fp32" if device_type == "cpu" else str(cfg.training.precision)


def profile_gpu_name(cfg: DictConfig, device_type: str) -> str:
    if cfg.profile.get("gpu"):
        return str(cfg.profile.gpu)
    if not OmegaConf.is_missing(cfg, "cluster") and cfg.get("cluster") is not None:
        return str(cfg.cluster.gpu)
    if device_type == "cpu":
        return "cpu"
    raise ConfigError("task=profile on cuda: name the GPU config this profile stands for with +cluster=<name> "
                      "or profile.gpu=<gpu config name>")


def _model_spec(cfg: DictConfig) -> Any:
    from vtrain.config.build import model_spec

    require_group(cfg, "model")
    return model_spec(cfg.model)


def import_only(cfg: DictConfig) -> int:
    """profile.device=none: write a collectives-only profile from nccl-tests files (no torch)."""
    from vtrain.cost.profile_io import write_profile
    from vtrain.profiler.nccl import import_nccl

    p = cfg.profile
    if not p.get("import_nccl") or not p.get("out_dir"):
        raise ConfigError("profile.device=none imports only: set profile.import_nccl=<file or folder> and "
                          "profile.out_dir=<profile folder>")
    if not p.get("gpu") and (OmegaConf.is_missing(cfg, "cluster") or cfg.get("cluster") is None):
        raise ConfigError("profile.device=none: name the GPU with profile.gpu=<gpu config> or +cluster=<name>")
    gpu = profile_gpu_name(cfg, "none")
    rows = import_nccl(str(p.import_nccl))
    dtype = str(p.dtype) if p.get("dtype") else str(cfg.training.precision)
    meta = {"device": "none", "device_name": f"{gpu} (nccl-tests import)", "gpu": gpu, "dtype": dtype,
            "host_included": False, "host_time_per_kernel_s": 0.0, "torch_version": "", "cuda_version": None,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "notes": [f"imported {len(rows)} nccl-tests rows from {p.import_nccl}"]}
    target = write_profile(Path(str(p.out_dir)), meta, [], rows)
    say(f"wrote {target} ({len(rows)} collective rows from {p.import_nccl})")
    return 0


def _sweep(p: Any, model: ModelSpec, device_type: str) -> Any:
    """The profile's sweep from ``profile.*``, each setting checked (one-line errors)."""
    from vtrain.profiler.sweep import Sweep

    for bad in (x for x in p.attention if x not in ("flash", "unfused")):
        raise ConfigError(f"profile.attention: {bad} is not one of flash, unfused")
    sweep = Sweep(micro_batch_sizes=list(p.micro_batch_sizes), seq_lens=list(p.seq_lens),
                  hidden_sizes=list(p.hidden_sizes) or [model.hidden_size], tp_shards=list(p.tp_shards),
                  attention=list(p.attention), adam_layers=list(p.adam_layers) or sorted({1, model.num_layers}),
                  warmup=int(p.warmup), repeats=int(p.repeats),
                  min_sample_s=float(p.min_sample_s) if device_type == "cpu" else 0.0,
                  max_tensor_bytes=float(p.max_tensor_gib) * 2**30,
                  clock=str(p.cpu_clock) if device_type == "cpu" else "wall",
                  cold_ops=bool(p.cold_cache) and device_type == "cpu")
    if sweep.clock not in ("cpu", "wall"):
        raise ConfigError(f"profile.cpu_clock={sweep.clock} is not one of cpu, wall")
    for s in sweep.seq_lens:
        if s > model.max_seq_len and str(model.position_embedding.value) == "learned":
            raise ConfigError(f"profile.seq_lens: {s} exceeds model.max_seq_len={model.max_seq_len}")
    return sweep


def _collectives(p: Any, device_type: str, notes: List[str]) -> List[Dict[str, Any]]:
    """Collective rows: timed on CUDA (profile.collectives), imported from nccl-tests output (profile.import_nccl)."""
    colls: List[Dict[str, Any]] = []
    if p.collectives and device_type == "cuda":
        from vtrain.profiler.collectives import profile_collectives

        colls, msg = profile_collectives(int(p.collective_max_mib), int(p.warmup), int(p.repeats))
        say(msg)
        notes.append(msg)
    elif device_type == "cpu":
        notes.append("collectives: not timed on cpu (one device)")
    if p.get("import_nccl"):
        from vtrain.profiler.nccl import import_nccl

        imported = import_nccl(str(p.import_nccl))
        colls += imported
        notes.append(f"imported {len(imported)} nccl-tests rows from {p.import_nccl}")
    return colls


def run(cfg: DictConfig, out_dir: Path) -> int:
    p = cfg.profile
    if str(p.device) == "none":
        return import_only(cfg)
    from vtrain.cost.profile_io import default_profiles_root
    from vtrain.profiler.settings import check_profile

    model = _model_spec(cfg)
    check_profile(p, model)
    import torch

    from vtrain.profiler.device import device_name, device_slug, torch_device, torch_dtype
    from vtrain.profiler.sweep import host_time_per_kernel, op_kernels, profile_adam, profile_ops

    dev = torch_device(str(p.device))
    dtype = profile_dtype(cfg, dev.type)
    torch_dtype(dtype)
    gpu = profile_gpu_name(cfg, dev.type)
    if int(p.threads) > 0 and dev.type == "cpu":
        torch.set_num_threads(int(p.threads))
    root = Path(str(cfg.cost.profile_dir)) if cfg.cost.get("profile_dir") else default_profiles_root()
    target = Path(str(p.out_dir)) if p.get("out_dir") else root / device_slug(dev)
    sweep = _sweep(p, model, dev.type)
    name = device_name(dev)
    say(f"vtrain profile: {name} ({dev}), {dtype}, torch {torch.__version__}, {torch.get_num_threads()} threads "
        f"-> {target}")
    t0 = time.perf_counter()
    ops, notes = profile_ops(model, sweep, dev, dtype)
    adam, adam_notes = profile_adam(model, sweep, dev, dtype)
    notes += adam_notes
    colls = _collectives(p, dev.type, notes)
    kernels: Dict[str, int] = {}
    from vtrain.workload.enums import Precision
    from vtrain.workload.plan import ParallelPlan

    for flash in (True, False):
        kernels.update(op_kernels(model, ParallelPlan(tp=1, pp=1, dp=1, micro_batch_size=1, global_batch_size=1,
                                                      seq_len=sweep.seq_lens[0], precision=Precision(dtype),
                                                      flash_attention=flash)))
    meta = {
        "device": dev.type, "device_name": name, "gpu": gpu, "dtype": dtype,
        "host_included": dev.type == "cpu",
        "host_time_per_kernel_s": 0.0 if dev.type == "cpu" else host_time_per_kernel(ops, kernels),
        "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "threads": torch.get_num_threads(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "sweep": {"micro_batch_sizes": list(sweep.micro_batch_sizes), "seq_lens": list(sweep.seq_lens),
                  "hidden_sizes": list(sweep.hidden_sizes), "tp_shards": list(sweep.tp_shards),
                  "attention": list(sweep.attention), "adam_layers": list(sweep.adam_layers)},
        "timing": {"warmup": sweep.warmup, "repeats": sweep.repeats, "min_sample_s": sweep.min_sample_s,
                   "statistic": "median", "spread": "p10/p90",
                   "cold_cache": {"ops": sweep.cold_ops, "adam": dev.type == "cpu"},
                   "clock": "cuda_events" if dev.type == "cuda" else sweep.clock,
                   "method": "cuda events, GPU kept busy (torch.cuda._sleep)" if dev.type == "cuda"
                   else f"{sweep.clock} clock per call ({'process_time' if sweep.clock == 'cpu' else 'perf_counter'})"},
        "notes": notes,
        "elapsed_s": round(time.perf_counter() - t0, 2),
    }
    from vtrain.cost.profile_io import write_profile

    if not ops and not adam and not colls:
        raise ProfileError("task=profile: nothing was measured (every sweep point was skipped)")
    write_profile(target, meta, ops + adam, colls)
    spreads = sorted((r["p90_s"] - r["p10_s"]) / r["median_s"] for r in ops + adam)
    mid = spreads[len(spreads) // 2] if spreads else 0.0
    say(f"wrote {target} ({len(ops)} op rows, {len(adam)} adam rows, {len(colls)} collective rows) in "
        f"{meta['elapsed_s']:.1f} s; median relative spread (p90-p10)/median = {mid:.1%}")
    for n in notes:
        say(f"note: {n}")
    return 0

