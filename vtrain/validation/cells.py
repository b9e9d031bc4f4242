"""Cells of a measured row as values: a cell parsed to its field's type (int, float, bool, an enum) and checked
against its domain, counts of GPUs and nodes, and the cells that stand for plan fields in other units (a sharding
strategy or FSDP degree, Composer's mixed-precision mode, batches in tokens, per rank or by accumulation steps).
Used by the row builder, :func:`vtrain.validation.rows.row_workload`.
"""
from __future__ import annotations

import enum
import typing
from typing import Any, Dict, Mapping, Optional

from vtrain.errors import ConfigError
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.names import SHARDING_STRATEGIES, cell_number, enum_key, table_key, zero_stage_cell
from vtrain.workload.fields import POSITIVE_INT, Domain, check_value, domain_of

_TRUE = {"1", "true", "yes", "y", "t", "on", "enabled", "\u2713", "\u2714"}  # and the check marks tables use
_FALSE = {"0", "false", "no", "n", "f", "off", "disabled", "\u2717", "\u2718"}  # and the crosses
_MAX_EXACT_INT = 2.0 ** 53  # the largest integer a float holds exactly


def parse_cell(row: MeasuredRow, column: str, raw: str, tp: Any) -> Any:
    """A CSV cell as a value of type ``tp`` (int, float, bool or an enum; ``none`` for an optional one), or a
    one-line error."""
    label = f"row {row.index}: {column}={raw}"
    if column == "zero_stage":
        raw = zero_stage_cell(raw)
    if typing.get_origin(tp) is typing.Union:  # Optional[X]
        if raw.lower() in ("none", "null", "dropless"):
            return None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is str:
        return raw
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(enum_key(tp, raw))
        except ValueError:
            raise ConfigError(f"{label} is not supported (one of {', '.join(e.value for e in tp)})") from None
    if tp is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ConfigError(f"{label} is not a boolean")
    try:
        value = cell_number(column, raw)
    except ValueError:
        raise ConfigError(f"{label} is not a number") from None
    if tp is int:
        if value != value or value in (float("inf"), -float("inf")) or value != int(value):
            raise ConfigError(f"{label} must be an integer")
        if abs(value) >= _MAX_EXACT_INT:  # 1e30 parses, but is no count of anything a run has
            raise ConfigError(f"{label} must be an integer below 2^53")
        return int(value)
    return value


# a measured run's data-parallel degree is at least 1 (the config's dp=0, "derive it", is an empty cell here)
_ROW_DOMAINS = {"dp": POSITIVE_INT}


def _columns(row: MeasuredRow, names: set[str], cls: type, aliases: Mapping[str, str]) -> Dict[str, Any]:
    """The row's cells of ``cls``'s fields, parsed and checked against the field's domain under the column's
    own name (``tp=0`` fails here, before dp is derived from it, and ``micro_batch=0`` names micro_batch)."""
    hints = typing.get_type_hints(cls)
    out: Dict[str, Any] = {}
    for column in row.values:
        name = aliases.get(column, column)
        raw = row.get(column)
        if name in names and raw is not None:
            out[name] = parse_cell(row, column, raw, hints[name])
            domain: Optional[Domain] = _ROW_DOMAINS.get(name) or domain_of(cls, name)
            if domain is not None and isinstance(out[name], (int, float)) and not isinstance(out[name], bool):
                check_value(f"row {row.index}: {column}", out[name], domain)
    return out


def _count(row: MeasuredRow, column: str) -> Optional[int]:
    """A count of GPUs or nodes (``num_gpus``, ``num_nodes``, ``gpus_per_node``, ``nvlink_domain``): an integer
    >= 1, None when the cell is empty, else a one-line error naming the column."""
    raw = row.get(column)
    if raw is None:
        return None
    value = int(parse_cell(row, column, raw, int))
    check_value(f"row {row.index}: {column}", value, POSITIVE_INT)
    return value


def _row_gpus(row: MeasuredRow, cluster_cfg: Any) -> Optional[int]:
    """The GPUs a row states: ``num_gpus``, else ``num_nodes`` x ``gpus_per_node`` (the cluster's when the row
    leaves it out), else None; a row stating all three must agree with itself."""
    gpus, nodes, per_node = _count(row, "num_gpus"), _count(row, "num_nodes"), _count(row, "gpus_per_node")
    if gpus is not None:
        if nodes is not None and per_node is not None and gpus != nodes * per_node:
            raise ConfigError(f"row {row.index}: num_gpus={gpus} disagrees with num_nodes={nodes} x "
                              f"gpus_per_node={per_node}")
        return gpus
    if nodes is not None:
        return nodes * (per_node or int(cluster_cfg.gpus_per_node))
    return None


# Composer's FSDP mixed-precision modes (llm-foundry's "MP Mode"): PURE reduces gradients in bf16 too, DEFAULT
# in fp32 (composer.distributed.mosaic_fsdp: get_mixed_precision), FULL trains in fp32 throughout
FSDP_MP_MODES = {"pure": False, "default": True, "full": True}  # -> fp32_grads


def _fsdp_mixed_precision(row: MeasuredRow, given: bool) -> Dict[str, Any]:
    """The gradient dtype an ``mp_mode`` column (Composer FSDP's mixed_precision) sets, unless stated."""
    raw = row.get("mp_mode")
    if raw is None or given:
        return {}
    key = table_key(raw)
    if key not in FSDP_MP_MODES:
        raise ConfigError(f"row {row.index}: mp_mode={raw} is not supported (one of PURE, DEFAULT, FULL)")
    return {"fp32_grads": FSDP_MP_MODES[key]}


def _sharding(row: MeasuredRow, p: Mapping[str, Any], given_stage: bool) -> Dict[str, Any]:
    """ZeRO stage and shard group from an ``fsdp`` column (torchtitan's FSDP degree, or NeMo's FSDP on/off: a
    degree > 1 shards within groups of that many ranks where it is less than the data-parallel ranks) and a
    ``sharding_strategy`` column (PyTorch FSDP's: FULL_SHARD stage 3, SHARD_GRAD_OP 2, HYBRID_SHARD 3 within
    a node, NO_SHARD 0); a stated ``zero_stage`` wins."""
    out: Dict[str, Any] = {}
    raw = row.get("fsdp")
    if raw is not None:
        on = raw.strip().lower()
        if on in _FALSE:
            pass
        elif on in _TRUE or on == "-1":  # -1: torchtitan's data_parallel_shard_degree default, every DP rank
            out["zero_stage"] = 3
        else:
            degree = int(parse_cell(row, "fsdp", raw, int))
            check_value(f"row {row.index}: fsdp", degree, POSITIVE_INT)
            if degree > 1:
                out["zero_stage"] = 3
                out["fsdp_shard_size"] = degree
    strategy = row.get("sharding_strategy")
    if strategy is not None:
        key = table_key(strategy)
        if key not in SHARDING_STRATEGIES:
            raise ConfigError(f"row {row.index}: sharding_strategy={strategy} is not supported (one of "
                              f"{', '.join(k.upper() for k in SHARDING_STRATEGIES if not k.startswith('_'))})")
        out["zero_stage"] = SHARDING_STRATEGIES[key]
        if key.startswith(("hybrid", "_hybrid")):
            out["fsdp_shard_size"] = _count(row, "gpus_per_node") or 8
    if given_stage:
        out.pop("zero_stage", None)
    if "fsdp_shard_size" in p:
        out.pop("fsdp_shard_size", None)
    return out


def _batches(row: MeasuredRow, plan_d: Mapping[str, Any], prefix: str) -> Dict[str, Any]:
    """Batch sizes given in other units: ``global_batch_tokens`` (a global batch in tokens: over seq_len),
    torchtitan's ``local_batch`` (each data-parallel rank's batch: split into pp micro-batches under a
    pipeline, torchtitan's default ``pipeline_parallel_microbatches``; the global batch is dp x ``grad_accum``
    of them) and, where no global batch is given, ``grad_accum`` (micro-batches per rank and step: micro x
    grad_accum x dp)."""
    out: Dict[str, Any] = {}
    seq, pp, dp = plan_d.get("seq_len"), int(plan_d.get("pp", 1)), plan_d.get("dp")
    tokens = row.get("global_batch_tokens")
    if tokens is not None and "global_batch_size" not in plan_d and seq:
        n = int(parse_cell(row, "global_batch_tokens", tokens, int))
        if n <= 0 or n % seq:
            raise ConfigError(f"{prefix} global_batch_tokens={tokens} must be a positive multiple of seq_len={seq}")
        out["global_batch_size"] = n // seq
    local = row.get("local_batch")
    if local is not None:
        n = int(parse_cell(row, "local_batch", local, int))
        check_value(f"{prefix} local_batch", n, POSITIVE_INT)
        if "micro_batch_size" not in plan_d:
            if n % pp:
                raise ConfigError(f"{prefix} local_batch={n} must divide into pp={pp} micro-batches (torchtitan)")
            out["micro_batch_size"] = n // pp
        if "global_batch_size" not in plan_d and "global_batch_size" not in out and dp:
            out["global_batch_size"] = n * _grad_accum(row, prefix) * int(dp)
    micro = out.get("micro_batch_size", plan_d.get("micro_batch_size"))
    given = "global_batch_size" in plan_d or "global_batch_size" in out
    if row.get("grad_accum") is not None and not given and micro and dp:
        out["global_batch_size"] = int(micro) * _grad_accum(row, prefix) * int(dp)
    return out


def _grad_accum(row: MeasuredRow, prefix: str) -> int:
    """The row's gradient-accumulation steps (1 when it does not say); a one-line error when not an integer >= 1."""
    raw = row.get("grad_accum")
    if raw is None:
        return 1
    n = int(parse_cell(row, "grad_accum", raw, int))
    check_value(f"{prefix} grad_accum", n, POSITIVE_INT)
    return n
