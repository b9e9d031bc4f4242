"""Every rule an input must satisfy, in one place, each failing with one line naming field and rule.

``check_plan`` is pure and cheap: the search calls it for every trial to prune infeasible plans.
"""
from __future__ import annotations

from typing import Iterable

from vtrain.errors import ConfigError
from vtrain.workload.enums import AttentionKind, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import ClusterSpec


def require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def check_choice(field: str, value: str, choices: Iterable[str]) -> None:
    options = [str(c) for c in choices]
    require(str(value) in options, f"{field}={value} is not one of {', '.join(options)}")


def check_positive(**values: float) -> None:
    for name, value in values.items():
        require(value is not None and value > 0, f"{name}={value} must be a positive number")


def check_model(m: ModelSpec) -> None:
    check_positive(**{"model.num_layers": m.num_layers, "model.hidden_size": m.hidden_size,
                      "model.num_heads": m.num_heads, "model.num_kv_heads": m.num_kv_heads,
                      "model.ffn_hidden_size": m.ffn_hidden_size, "model.vocab_size": m.vocab_size,
                      "model.max_seq_len": m.max_seq_len})
    require(m.kv_channels > 0 or m.is_mla or m.hidden_size % m.num_heads == 0,
            f"model.num_heads={m.num_heads} must divide model.hidden_size={m.hidden_size} (or set model.kv_channels)")
    require(m.num_heads % m.num_kv_heads == 0,
            f"model.num_kv_heads={m.num_kv_heads} must divide model.num_heads={m.num_heads}")
    check_moe_model(m)
    require(0 <= m.dropout < 1, f"model.dropout={m.dropout} must be in [0, 1)")
    require(m.vocab_divisible_by >= 0,
            f"model.vocab_divisible_by={m.vocab_divisible_by} must be >= 0 (0: no vocabulary padding)")


def check_moe_model(m: ModelSpec) -> None:
    """Attention-variant and mixture-of-experts rules."""
    require(m.attention != AttentionKind.MHA or m.num_kv_heads == m.num_heads,
            f"model.attention=mha needs num_kv_heads={m.num_kv_heads} = num_heads={m.num_heads}")
    if m.is_mla:
        for name in ("kv_lora_rank", "qk_head_dim", "v_head_dim"):
            require(getattr(m, name) > 0, f"model.{name}={getattr(m, name)} must be > 0 with attention=mla")
    if m.is_moe:
        require(m.moe_top_k <= m.num_experts,
                f"model.moe_top_k={m.moe_top_k} must be <= num_experts={m.num_experts}")
        require(m.num_moe_layers > 0, f"model.first_dense_layers={m.first_dense_layers} leaves no MoE layer of "
                f"num_layers={m.num_layers} (moe_layer_freq={m.moe_layer_freq})")
    else:
        require(m.num_shared_experts == 0 and m.mtp_layers >= 0,
                f"model.num_shared_experts={m.num_shared_experts} needs num_experts > 0")


def check_plan(m: ModelSpec, p: ParallelPlan, cluster: ClusterSpec) -> None:
    """Divisibility and size rules of a plan (Megatron-LM's own asserts, with readable messages)."""
    check_positive(tp=p.tp, pp=p.pp, dp=p.dp, micro_batch_size=p.micro_batch_size,
                   global_batch_size=p.global_batch_size, seq_len=p.seq_len,
                   virtual_stages=p.virtual_stages)
    require(p.num_gpus <= cluster.num_gpus,
            f"tp*pp*dp={p.tp}*{p.pp}*{p.dp}={p.num_gpus} exceeds the {cluster.num_gpus} GPUs of "
            f"cluster {cluster.name}")
    require(m.num_heads % p.tp == 0, f"tp={p.tp} must divide attention heads={m.num_heads}")
    require(m.num_kv_heads % p.tp == 0, f"tp={p.tp} must divide kv heads={m.num_kv_heads}")
    require(m.ffn_hidden_size % p.tp == 0, f"tp={p.tp} must divide ffn_hidden_size={m.ffn_hidden_size}")
    stages = p.pp * (1 if p.schedule == Schedule.DUALPIPE else p.chunks)  # DualPipe: each direction is pp deep
    split = m.num_layers + p.account_for_embedding_in_pipeline_split + p.account_for_loss_in_pipeline_split
    what = "layers" if split == m.num_layers else "layers+embedding+loss"
    if stages > 1 and p.chunks > 1 and p.schedule != Schedule.DUALPIPE:
        require(split % stages == 0, f"pp*virtual_stages={p.pp}*{p.chunks}={stages} must divide {what}={split}")
    else:
        require(split % stages == 0, f"pp={p.pp} must divide {what}={split}")
    check_moe_plan(m, p)
    require(p.global_batch_size % (p.dp * p.micro_batch_size) == 0,
            f"dp*micro_batch_size={p.dp}*{p.micro_batch_size} must divide global_batch_size="
            f"{p.global_batch_size}")
    require(not p.sequence_parallel or p.tp > 1, "sequence_parallel=true needs tp>1")
    require(not p.sequence_parallel or p.seq_len % p.tp == 0,
            f"tp={p.tp} must divide seq_len={p.seq_len} with sequence_parallel")
    if p.schedule == Schedule.INTERLEAVED:
        require(p.pp > 1, "schedule=interleaved needs pp>1")
        require(p.num_microbatches % p.pp == 0,
                f"pp={p.pp} must divide the number of micro-batches={p.num_microbatches} "
                f"with schedule=interleaved")
    require(str(p.precision) in cluster.gpu.peak_tflops,
            f"precision={p.precision} has no peak_tflops entry for gpu={cluster.gpu.name}")


def check_moe_plan(m: ModelSpec, p: ParallelPlan) -> None:
    """Expert parallelism (Megatron-Core's rules: etp*ep*edp = tp*dp*cp per stage) and the schedules that
    need a B/W split or two chunks."""
    from vtrain.comm.ep import check_expert_parallel  # noqa: I001
    from vtrain.sim.schedule import check_schedule

    check_expert_parallel(m, p)
    check_schedule(p.schedule, p.pp, p.num_microbatches)


def check_enums(schedule: str, recompute: str, precision: str) -> None:
    check_choice("parallelism.schedule", schedule, [s.value for s in Schedule])
    check_choice("parallelism.recompute", recompute, [r.value for r in Recompute])
    check_choice("training.precision", precision, [x.value for x in Precision])
