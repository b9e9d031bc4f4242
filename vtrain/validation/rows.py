"""Turn one measured row into a Workload: the row's model, plan and a cluster sized to its GPUs.

Defaults are those of the vTrain measurements (Megatron-DeepSpeed, fp16, full recompute, 1F1B, GPT
blocks with LayerNorm, GeLU, learned positions, tied embeddings, vocabulary 50257, no DP bucketing),
and an unpadded vocabulary (``vocab_divisible_by=0``: each TP rank holds 50257 // t rows; the measured
output-layer times follow that shard's alignment, see README "Accuracy"; a column overrides it).
``schedule=interleaved`` without ``virtual_stages`` uses 2 model chunks per stage where layers divide.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from vtrain.config.build import cluster_spec, gpu_spec
from vtrain.config.validate import check_model, check_plan
from vtrain.errors import ConfigError
from vtrain.validation.csv_io import MeasuredRow
from vtrain.workload.enums import NormType, PositionEmbedding, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f"}


def _int(row: MeasuredRow, key: str, default: int | None = None) -> int:
    raw = row.get(key)
    if raw is None:
        if default is None:
            raise ConfigError(f"row {row.index}: {key} is empty")
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"row {row.index}: {key}={raw} is not a number") from None
    if value != int(value):
        raise ConfigError(f"row {row.index}: {key}={raw} must be an integer")
    return int(value)


def _bool(row: MeasuredRow, key: str, default: bool) -> bool:
    raw = row.get(key)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ConfigError(f"row {row.index}: {key}={raw} is not a boolean")


def _enum(row: MeasuredRow, key: str, enum: Any, default: Any) -> Any:
    raw = row.get(key)
    if raw is None:
        return default
    try:
        return enum(raw.lower())
    except ValueError:
        raise ConfigError(f"row {row.index}: {key}={raw} is not supported "
                          f"(one of {', '.join(e.value for e in enum)})") from None


def row_workload(row: MeasuredRow, cluster_cfg: Any, load_gpu: Callable[[str], Any], base_usd: float = 0.0) -> Workload:
    """The workload of one measured row on the ``cluster`` config (resized to the row's GPUs). Raises
    ConfigError (the skip reason) when unsupported."""
    hidden = _int(row, "hidden_size")
    heads = _int(row, "num_heads")
    seq = _int(row, "seq_len")
    model = ModelSpec(
        name=row.get("name", f"gpt-h{hidden}-l{_int(row, 'num_layers')}") or "row",
        num_layers=_int(row, "num_layers"), hidden_size=hidden, num_heads=heads,
        num_kv_heads=_int(row, "num_kv_heads", heads), ffn_hidden_size=_int(row, "ffn_hidden_size", 4 * hidden),
        gated_mlp=_bool(row, "gated_mlp", False), norm=NormType.LAYERNORM,
        position_embedding=PositionEmbedding.LEARNED, use_bias=True, dropout=0.1,
        vocab_size=_int(row, "vocab_size", 50257), tied_embeddings=True, max_seq_len=seq,
        vocab_divisible_by=_int(row, "vocab_divisible_by", 0))
    if model.gated_mlp:
        model = replace(model, norm=NormType.RMSNORM, position_embedding=PositionEmbedding.ROPE,
                        use_bias=False, dropout=0.0, tied_embeddings=False)
    check_model(model)
    tp, dp, pp = _int(row, "tp"), _int(row, "dp"), _int(row, "pp")
    num_gpus = _int(row, "num_gpus")
    if tp * dp * pp != num_gpus:
        raise ConfigError(f"row {row.index}: tp*dp*pp={tp * dp * pp} differs from num_gpus={num_gpus}")
    schedule = _enum(row, "schedule", Schedule, Schedule.ONE_F_ONE_B)
    # interleaved without a chunk count: 2 chunks per stage where the layers allow (Megatron's usual)
    layers = _int(row, "num_layers")
    default_v = 2 if schedule == Schedule.INTERLEAVED and layers % (2 * pp) == 0 else 1
    plan = ParallelPlan(
        tp=tp, pp=pp, dp=dp, micro_batch_size=_int(row, "micro_batch"), global_batch_size=_int(row, "global_batch"),
        seq_len=seq, schedule=schedule, virtual_stages=_int(row, "virtual_stages", default_v),
        recompute=_enum(row, "recompute", Recompute, Recompute.FULL),
        sequence_parallel=_bool(row, "sequence_parallel", False),
        distributed_optimizer=_bool(row, "distributed_optimizer", False),
        overlap_grad_reduce=_bool(row, "overlap_grad_reduce", False),
        precision=_enum(row, "precision", Precision, Precision.FP16),
        flash_attention=_bool(row, "flash_attention", False))
    gpu_name = row.get("gpu") or str(cluster_cfg.gpu)
    gpu = gpu_spec(load_gpu(gpu_name))
    gpn = row.get("gpus_per_node")
    cluster = cluster_spec(cluster_cfg, gpu, num_gpus)
    if gpn is not None:
        per_node = _int(row, "gpus_per_node")
        cluster = replace(cluster, gpus_per_node=per_node, num_nodes=-(-num_gpus // per_node))
    check_plan(model, plan, cluster)
    return Workload(model, plan, cluster, base_usd, 1.0, "analytical")
