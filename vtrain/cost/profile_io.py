"""Read, check, write and find operator profiles (``profiles/<device>/``; schema in profiles/README.md).

Plain data only: ``meta.json`` + ``ops.csv`` (+ ``collectives.csv``). Every problem with a file is a
:class:`~vtrain.errors.ProfileError` of one line that names the file and the problem. No torch here.
"""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from statistics import median
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from vtrain.cost.profiled import CollectiveSample, OpSample, ProfileMeta, ProfileTable
from vtrain.errors import ProfileError

SCHEMA_VERSION = 1
META_FILE = "meta.json"
OPS_FILE = "ops.csv"
COLLECTIVES_FILE = "collectives.csv"
SUSTAINED_FILE = "sustained_gemm.csv"  # optional: python -m vtrain.profiler.sustained_gemm
# a GPU's sustained GEMM rate over its burst rate: the H200 at its 700 W cap measured 0.83; a power-capped part
# well below its boost clock ~0.5; above 1.05 the table did not measure a GPU (on a CPU the later windows run
# faster, warm caches): outside these bounds the table is refused
SUSTAINED_BOUNDS = (0.3, 1.05)
DTYPES = ("fp32", "bf16", "fp16")
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "p2p")

SHAPE_COLUMNS = ["micro_batch", "seq_len", "hidden", "tp", "heads", "kv_heads", "head_dim", "ffn", "vocab",
                 "layers"]
OPS_COLUMNS = ["op", "variant", "dtype", "device", *SHAPE_COLUMNS, "m", "n", "k", "batch", "flops", "bytes",
               "params", "samples", "median_s", "p10_s", "p90_s", "host_s"]
COLLECTIVE_COLUMNS = ["kind", "group_size", "nodes", "bytes", "samples", "median_s", "p10_s", "p90_s", "source"]
META_REQUIRED = ("schema_version", "device", "device_name", "gpu", "dtype", "host_included",
                 "host_time_per_kernel_s", "torch_version", "date")


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def default_profiles_root() -> Path:
    return project_root() / "profiles"


def slugify(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; safe as a folder name."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "device"


# ---------------------------------------------------------------------------------------- reading
def _read_meta(path: Path) -> Dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(f"{path}: missing (a profile folder needs {META_FILE} and {OPS_FILE})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise ProfileError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    missing = [k for k in META_REQUIRED if k not in meta]
    if missing:
        raise ProfileError(f"{path}: missing field(s) {', '.join(missing)}")
    if meta["schema_version"] != SCHEMA_VERSION:
        raise ProfileError(f"{path}: schema_version {meta['schema_version']!r} is not supported "
                           f"(this vtrain reads {SCHEMA_VERSION})")
    if meta["dtype"] not in DTYPES:
        raise ProfileError(f"{path}: dtype {meta['dtype']!r} is not one of {', '.join(DTYPES)}")
    return meta


def _rows(path: Path, columns: Sequence[str]) -> Iterable[tuple[int, Dict[str, str]]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in columns if c not in header]
            if missing:
                raise ProfileError(f"{path}: missing column(s) {', '.join(missing)}")
            for lineno, row in enumerate(reader, start=2):
                if None in row or any(v is None for v in row.values()):
                    raise ProfileError(f"{path}: line {lineno}: wrong number of fields")
                yield lineno, row
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not a text CSV file") from None
    except csv.Error as exc:
        raise ProfileError(f"{path}: malformed CSV ({exc})") from None


def _num(path: Path, lineno: int, row: Mapping[str, str], col: str, positive: bool = False) -> float:
    raw = row[col]
    try:
        v = float(raw)
    except ValueError:
        raise ProfileError(f"{path}: line {lineno}: column {col}={raw!r} is not a number") from None
    if math.isnan(v) or math.isinf(v) or v < 0 or (positive and v == 0):
        rule = "a positive number" if positive else "a finite number >= 0"
        raise ProfileError(f"{path}: line {lineno}: column {col}={raw!r} must be {rule}")
    return v


def read_profile(directory: Path | str) -> ProfileTable:
    """Load and check one profile folder."""
    d = Path(directory)
    if not d.is_dir():
        raise ProfileError(f"{d}: not a profile folder (no such directory)")
    meta = _read_meta(d / META_FILE)
    dtype, device = str(meta["dtype"]), str(meta["device"])
    ops: List[OpSample] = []
    ops_path = d / OPS_FILE
    if not ops_path.is_file():
        raise ProfileError(f"{ops_path}: missing (a profile folder needs {META_FILE} and {OPS_FILE})")
    for lineno, row in _rows(ops_path, OPS_COLUMNS):
        if row["dtype"] != dtype:
            raise ProfileError(f"{ops_path}: line {lineno}: dtype {row['dtype']} does not match "
                               f"{META_FILE} dtype {dtype}")
        if row["device"] != device:
            raise ProfileError(f"{ops_path}: line {lineno}: device {row['device']} does not match "
                               f"{META_FILE} device {device}")
        if not row["op"]:
            raise ProfileError(f"{ops_path}: line {lineno}: empty op name")
        n = {c: _num(ops_path, lineno, row, c) for c in
             (*SHAPE_COLUMNS, "m", "n", "k", "batch", "flops", "bytes", "params", "samples", "p10_s", "p90_s",
              "host_s")}
        med = _num(ops_path, lineno, row, "median_s", positive=True)
        if n["flops"] == 0 and n["bytes"] == 0 and n["params"] == 0:
            raise ProfileError(f"{ops_path}: line {lineno}: op {row['op']} has no size (flops, bytes, params all 0)")
        ops.append(OpSample(row["op"], row["variant"], dtype, int(n["m"]), int(n["n"]), int(n["k"]),
                            int(n["batch"]), n["flops"], n["bytes"], n["params"], med, n["p10_s"], n["p90_s"],
                            n["host_s"], int(n["samples"]), {c: int(n[c]) for c in SHAPE_COLUMNS}))
    colls: List[CollectiveSample] = []
    coll_path = d / COLLECTIVES_FILE
    if coll_path.is_file():
        for lineno, row in _rows(coll_path, COLLECTIVE_COLUMNS):
            if row["kind"] not in COLLECTIVE_KINDS:
                raise ProfileError(f"{coll_path}: line {lineno}: kind {row['kind']!r} is not one of "
                                   f"{', '.join(COLLECTIVE_KINDS)}")
            n = {c: _num(coll_path, lineno, row, c) for c in ("group_size", "nodes", "samples", "p10_s", "p90_s")}
            colls.append(CollectiveSample(row["kind"], int(n["group_size"]), max(1, int(n["nodes"])),
                                          _num(coll_path, lineno, row, "bytes", positive=True),
                                          _num(coll_path, lineno, row, "median_s", positive=True),
                                          n["p10_s"], n["p90_s"], row["source"]))
    if not ops and not colls:
        raise ProfileError(f"{ops_path}: no rows")
    pm = ProfileMeta(str(d), device, str(meta["device_name"]), str(meta["gpu"]), dtype, bool(meta["host_included"]),
                     float(meta["host_time_per_kernel_s"]), meta)
    sustained = d / SUSTAINED_FILE
    fraction = sustained_fraction(sustained, dtype) if sustained.is_file() else None
    return ProfileTable(pm, tuple(ops), tuple(colls), fraction)


def steady_ratio(rows: Sequence[Mapping[str, Any]]) -> Optional[float]:
    """One GEMM's rows (a burst row, then its sustained windows in order): the median rate of the second half
    of the windows (past the power cap's settling) over the burst rate; None without both."""
    burst = [float(r["tflops"]) for r in rows if r["phase"] == "burst"]
    windows = [float(r["tflops"]) for r in rows if r["phase"] == "sustained"]
    if not burst or not windows or burst[0] <= 0:
        return None
    return median(windows[len(windows) // 2:]) / burst[0]


def sustained_fraction(path: Path, dtype: str) -> Optional[float]:
    """The median steady/burst ratio over the GEMM shapes of ``dtype`` in a sustained_gemm.csv; None when it
    holds none of that dtype. A malformed table is a one-line error naming the file and line."""
    shapes: Dict[Tuple[str, str, str], List[Dict[str, str]]] = {}
    for lineno, row in _rows(path, ("recipe", "m", "n", "k", "phase", "tflops")):
        if row["phase"] not in ("burst", "sustained"):
            raise ProfileError(f"{path}: line {lineno}: phase {row['phase']!r} is not burst or sustained")
        _num(path, lineno, row, "tflops", positive=True)
        if row["recipe"] == dtype:
            shapes.setdefault((row["m"], row["n"], row["k"]), []).append(row)
    ratios = [r for r in (steady_ratio(rows) for rows in shapes.values()) if r is not None]
    if not ratios:
        return None
    fraction = median(ratios)
    lo, hi = SUSTAINED_BOUNDS
    if not lo < fraction <= hi:
        raise ProfileError(f"{path}: sustained/burst GEMM rate {fraction:.3g} of {dtype} is outside ({lo:g}, {hi:g}]: "
                           "not a GPU's power-capped clock")
    return fraction


# ---------------------------------------------------------------------------------------- writing
def _write_csv(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="raise")
        w.writeheader()
        for row in rows:
            w.writerow({c: _fmt(row.get(c, "")) for c in columns})


def _fmt(v: Any) -> Any:
    return f"{v:.15g}" if isinstance(v, float) else v


def write_profile(directory: Path | str, meta: Mapping[str, Any], ops: Sequence[Mapping[str, Any]],
                  collectives: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Write meta.json, ops.csv and (when given) collectives.csv; read back to check."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(f"{d}: cannot create the profile folder ({exc.strerror})") from None
    full = {"schema_version": SCHEMA_VERSION, **meta,
            "files": {"ops": OPS_FILE, **({"collectives": COLLECTIVES_FILE} if collectives else {})}}
    (d / META_FILE).write_text(json.dumps(full, indent=2, default=str) + "\n")
    _write_csv(d / OPS_FILE, OPS_COLUMNS, ops)
    if collectives:
        _write_csv(d / COLLECTIVES_FILE, COLLECTIVE_COLUMNS, collectives)
    elif (d / COLLECTIVES_FILE).exists():
        (d / COLLECTIVES_FILE).unlink()
    read_profile(d)
    return d


# ---------------------------------------------------------------------------------------- finding
def _profile_dirs(root: Path) -> List[Path]:
    if (root / META_FILE).is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / META_FILE).is_file())


def find_profile(cfg: Any, required: bool = False) -> Optional[ProfileTable]:
    """The profile for the config's GPU (meta ``gpu`` == cluster.gpu) and precision.

    ``cost.profile_dir`` may name one profile folder (used as is, checked against the config) or a
    root holding several. ``required`` (cost.model=profile): no match is an error; otherwise
    (cost.model=auto) None selects the analytical model. A corrupt profile is always an error.
    """
    explicit = cfg.cost.get("profile_dir") if hasattr(cfg.cost, "get") else getattr(cfg.cost, "profile_dir", None)
    root = Path(str(explicit)).expanduser() if explicit else default_profiles_root()
    gpu = str(cfg.cluster.gpu)
    precision = str(cfg.training.precision)
    single = (root / META_FILE).is_file()
    if explicit and not root.exists():
        raise ProfileError(f"cost.profile_dir={root}: no such directory")
    found: List[str] = []
    for d in _profile_dirs(root):
        table = read_profile(d)
        found.append(f"{d.name} (gpu={table.meta.gpu}, dtype={table.meta.dtype})")
        if single:
            if table.meta.gpu != gpu:
                raise ProfileError(f"{d / META_FILE}: profile is for gpu={table.meta.gpu}, the cluster has gpu={gpu}")
            if table.meta.dtype != precision:
                raise ProfileError(f"{d / META_FILE}: profile dtype {table.meta.dtype} does not match "
                                   f"training.precision={precision}")
            return table
        if table.meta.gpu == gpu and table.meta.dtype == precision:
            return table
    if required:
        have = f"; found: {', '.join(found)}" if found else ""
        raise ProfileError(f"cost.model=profile: no profile for gpu={gpu} dtype={precision} under {root}{have} "
                           f"(run task=profile, or set cost.profile_dir)")
    return None
