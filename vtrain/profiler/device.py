"""Devices and dtypes for the profiler: names, folder slugs, synchronisation."""
from __future__ import annotations

import platform
from pathlib import Path

import torch

from vtrain.errors import ProfileError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_device(spec: str) -> torch.device:
    """``cpu`` or ``cuda[:i]``; a CUDA request without a visible GPU is a one-line error."""
    try:
        dev = torch.device(spec)
    except (RuntimeError, ValueError, TypeError):  # torch's own message lists every device type it knows
        raise ProfileError(f"profile.device={spec} is not one of cpu, cuda, cuda:<index>") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ProfileError(f"profile.device={spec}: no CUDA device is visible (torch {torch.__version__})")
    if dev.type not in ("cpu", "cuda"):
        raise ProfileError(f"profile.device={spec} is not one of cpu, cuda, cuda:<index>")
    if dev.type == "cuda":
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ProfileError(f"profile.device={spec}: only {torch.cuda.device_count()} CUDA device(s) visible")
        dev = torch.device("cuda", dev.index or 0)
        torch.cuda.set_device(dev)  # events, _sleep and allocations of the timing loop use this device
    return dev


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ProfileError(f"profile.dtype={name} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return cpu_model_name()


def device_slug(dev: torch.device) -> str:
    from vtrain.cost.profile_io import slugify

    name = slugify(device_name(dev))
    return name if dev.type == "cuda" else f"cpu-{name}"


def synchronize(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def memory_gib(dev: torch.device) -> float:
    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).total_memory / 2**30
    try:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 8.0
