"""What the component-table profilers share (``scaled_gemm``, ``attention_lengths``): their common arguments,
the checks made before any timing (one line, exit 2, nothing left behind), and writing the table whole."""
from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from vtrain.errors import VtrainError
from vtrain.io.args import ArgumentParser, int_at_least

MEASURE_ERRORS = (RuntimeError, ValueError, NotImplementedError)  # what torch raises for a case it cannot run


def reason(exc: BaseException) -> str:
    """The first line of torch's message for a case it could not run (the table's `skipped` lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def release(dev: Any) -> None:
    """Hand a case's freed memory back to the device before the next, larger one."""
    if dev.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def table_parser(prog: str, description: str, table_file: str) -> ArgumentParser:
    """The parser with the arguments every table profiler takes: --gpu, --out, --device, --warmup, --repeats."""
    ap = ArgumentParser(prog=prog, description=description)
    ap.add_argument("--gpu", required=True, help="the gpu/ config the device stands for (h200, h100_sxm, ...)")
    ap.add_argument("--out", required=True, type=Path, help=f"folder of the table ({table_file})")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:<index> or cpu (cpu: a check of the code only)")
    ap.add_argument("--warmup", type=int_at_least(0), default=2)
    ap.add_argument("--repeats", type=int_at_least(1), default=5)
    return ap


def check_args(args: argparse.Namespace) -> None:
    """--gpu names a gpu/ config; --out is no file."""
    from vtrain.config.compose import group_options

    if args.gpu not in group_options("gpu"):
        raise VtrainError(f"--gpu={args.gpu} is not a gpu/ config; one of: {', '.join(group_options('gpu'))}")
    if args.out.exists() and not args.out.is_dir():
        raise VtrainError(f"--out={args.out} is a file, not a folder")


def open_device(args: argparse.Namespace) -> Tuple[Any, List[Path]]:
    """(the torch device of --device, the folders of --out this run made), before the minutes of timing."""
    from vtrain.profiler.device import torch_device

    try:
        dev = torch_device(args.device)
    except VtrainError as exc:  # worded for task=profile's field
        raise VtrainError(str(exc).replace("profile.device=", "--device=", 1)) from None
    return dev, writable_folder(args.out)


def writable_folder(path: Path) -> List[Path]:
    """Make ``path`` (and missing parents) and check a file can be written there; returns the folders made."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        for d in missing:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise VtrainError(f"--out={path}: cannot write there ({exc.strerror or exc})") from None
    return list(reversed(missing))


def write_table(path: Path, rows: Sequence[Dict[str, object]], columns: Sequence[str]) -> None:
    """Write the table whole (a temporary file renamed over the target: never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def finish(path: Path, columns: Sequence[str], rows: Sequence[Dict[str, object]], skipped: Sequence[str],
           created: Sequence[Path], what: str, device: str) -> int:
    """Print what was skipped, then write the table; with no row, remove the folders this run made (only
    while empty) and fail."""
    for s in skipped:
        print(f"skipped: {s}")
    if not rows:
        for d in reversed(created):
            try:
                d.rmdir()
            except OSError:
                break
        print(f"error: no {what} could be timed on this device", file=sys.stderr)
        return 1
    write_table(path, rows, columns)
    print(f"{len(rows)} {what}s on {device} -> {path}")
    return 0
