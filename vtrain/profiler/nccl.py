"""Import nccl-tests output (CSV form) into profile collective rows. No torch.

Accepted format (e.g. shared/data/nccl_allreduce/a100/allreduce_8gpu.csv):
``size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)`` -- out-of-place, then in-place.
The in-place time is used (what Megatron's all-reduce does). The collective kind and the GPU count
come from the file name: ``<kind>_<n>gpu.csv`` with kind allreduce | allgather | reducescatter |
sendrecv. nccl-tests measure one node, so ``nodes`` = 1.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any, Dict, List

from vtrain.errors import ProfileError

KINDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
         "sendrecv": "p2p", "all_reduce": "all_reduce", "all_gather": "all_gather",
         "reduce_scatter": "reduce_scatter", "p2p": "p2p"}
HEADER = ["size(B)", "count", "type", "time(ns)", "busbw(GB/s)", "time(ns)", "busbw(GB/s)"]
_NAME = re.compile(r"^(?P<kind>[a-z_]+?)_?(?P<n>\d+)gpus?$")


def parse_nccl_csv(path: Path | str) -> List[Dict[str, Any]]:
    p = Path(path)
    m = _NAME.match(p.stem.lower())
    if not m or m.group("kind") not in KINDS:
        raise ProfileError(f"{p}: cannot tell the collective and GPU count from the file name "
                           f"(expected <kind>_<n>gpu.csv, kind one of allreduce, allgather, reducescatter, sendrecv)")
    kind, n = KINDS[m.group("kind")], int(m.group("n"))
    rows: List[Dict[str, Any]] = []
    try:
        with p.open(newline="") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            if header[:7] != HEADER:
                raise ProfileError(f"{p}: header {','.join(header)!r} is not the nccl-tests format "
                                   f"{','.join(HEADER)!r}")
            for lineno, rec in enumerate(reader, start=2):
                if not rec or not "".join(rec).strip():
                    continue
                if len(rec) < 7:
                    raise ProfileError(f"{p}: line {lineno}: expected 7 fields, got {len(rec)}")
                try:
                    size, t_ns = float(rec[0]), float(rec[5])
                except ValueError:
                    raise ProfileError(f"{p}: line {lineno}: size or in-place time is not a number") from None
                if size <= 0 or t_ns <= 0:
                    raise ProfileError(f"{p}: line {lineno}: size and time must be positive")
                rows.append({"kind": kind, "group_size": n, "nodes": 1, "bytes": size, "samples": 1,
                             "median_s": t_ns * 1e-9, "p10_s": t_ns * 1e-9, "p90_s": t_ns * 1e-9,
                             "source": f"nccl-tests:{p.name}"})
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{p}: cannot read ({exc.__class__.__name__})") from None
    if not rows:
        raise ProfileError(f"{p}: no data rows")
    return rows


def import_nccl(path: Path | str) -> List[Dict[str, Any]]:
    """Rows from one nccl-tests CSV file, or from every ``*.csv`` in a folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(p.glob("*.csv"))
        if not files:
            raise ProfileError(f"profile.import_nccl={p}: no *.csv files")
        return [row for f in files for row in parse_nccl_csv(f)]
    if not p.is_file():
        raise ProfileError(f"profile.import_nccl={p}: no such file or folder")
    return parse_nccl_csv(p)
