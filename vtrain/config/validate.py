"""Every rule an input must satisfy, in one place, each failing with one line naming field and rule.

``check_plan`` is pure and cheap: the search calls it for every trial to prune infeasible plans.
"""
from __future__ import annotations

import functools
from typing import Iterable

from vtrain.comm.ep import check_expert_parallel
from vtrain.errors import ConfigError
from vtrain.sim.schedule import check_schedule
from vtrain.workload import bounds as B
from vtrain.workload.arith import divisors
from vtrain.workload.chunks import TWO_CHUNKS, V_SHAPE
from vtrain.workload.enums import (
    AttentionKind,
    CpComm,
    Precision,
    Recompute,
    Schedule,
    parse_cuda_graph_scope,
    parse_recompute_modules,
)
from vtrain.workload.model import ModelSpec
from vtrain.workload.pipeline_layout import layout_layers
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import GIB, ClusterSpec
from vtrain.workload.tp_split import tp_misfit


def require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


OPTIMIZERS = ("adam", "adamw")
MOMENT_DTYPES = ("fp32", "bf16")


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


@functools.lru_cache(maxsize=256)  # check_plan formats its messages eagerly: the search checks every plan
def _divisors_hint(n: int, limit: int = 12) -> str:
    ds = list(divisors(n, 1 << 16))  # plausible degrees only: a divisor of 10^9 heads is no hint
    return ", ".join(map(str, ds[:limit])) + (", ..." if len(ds) > limit else "")


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
        # an expert receives each token at most once: its load is at most num_experts / top_k times the mean
        most = m.num_experts / m.moe_top_k
        require(m.moe_imbalance <= most, f"model.moe_imbalance={m.moe_imbalance:g} must be <= num_experts/moe_top_k="
                f"{m.num_experts}/{m.moe_top_k} (the busiest expert cannot receive more than every token)")
        if m.capacity_factor is not None and m.capacity_factor > most:
            raise ConfigError(f"model.capacity_factor={m.capacity_factor:g} must be <= num_experts/moe_top_k="
                              f"{m.num_experts}/{m.moe_top_k} (a larger capacity than every token never binds: leave "
                              "it unset, dropless)")
    else:
        require(m.num_shared_experts == 0 and m.mtp_layers >= 0,
                f"model.num_shared_experts={m.num_shared_experts} needs num_experts > 0")


def check_plan(m: ModelSpec, p: ParallelPlan, cluster: ClusterSpec) -> None:
    """Divisibility and size rules of a plan (Megatron-LM's and FSDP's own asserts, readable)."""
    check_positive(tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, micro_batch_size=p.micro_batch_size,
                   global_batch_size=p.global_batch_size, seq_len=p.seq_len, virtual_stages=p.virtual_stages)
    # the memory and step models are mixed-precision Adam's (fp32 master weights, m and v); AdamW's decoupled
    # weight decay changes neither
    check_choice("training.optimizer", p.optimizer, OPTIMIZERS)
    check_choice("training.optimizer_moments", p.optimizer_moments, MOMENT_DTYPES)
    if not (p.virtual_stages == 1 or p.schedule == Schedule.INTERLEAVED):
        raise ConfigError(f"parallelism.virtual_stages={p.virtual_stages} needs schedule=interleaved (schedule="
                          f"{p.schedule.value} runs {p.chunks} model chunk(s) per stage); set virtual_stages=1")
    domain, node = cluster.nvlink_domain, cluster.gpus_per_node
    if not (domain == 0 or domain % node == 0 or node % domain == 0):
        raise ConfigError(f"cluster.nvlink_domain={domain} must be 0 (one node), a multiple of gpus_per_node={node} "
                          "(NVLink racks) or a divisor of it (NVLink islands inside a node)")
    if not (p.num_gpus <= cluster.num_gpus):
        raise ConfigError(f"tp*cp*pp*dp={p.tp}*{p.cp}*{p.pp}*{p.dp}={p.num_gpus} exceeds the {cluster.num_gpus} "
                          f"GPUs of cluster {cluster.name}")
    misfit = tp_misfit(m, p.tp)
    if misfit is not None:
        what, value = misfit
        hint = "" if what == "ffn_hidden_size" else f": try {_divisors_hint(value)}"
        raise ConfigError(f"tp={p.tp} must divide {what}={value}{hint}")
    if not (p.global_batch_size % (p.dp * p.micro_batch_size) == 0):  # before the rules on the micro-batch count
        raise ConfigError(f"dp*micro_batch_size={p.dp}*{p.micro_batch_size} must divide global_batch_size="
                          f"{p.global_batch_size}")
    check_pipeline_split(m, p)
    check_moe_plan(m, p)
    if not (p.recompute_num_layers == 0 or p.recompute == Recompute.FULL):
        raise ConfigError(f"parallelism.recompute_num_layers={p.recompute_num_layers} needs recompute=full (the "
                          f"block method recomputes whole layers; got recompute={p.recompute.value})")
    _check_offload(m, p, cluster)
    if not (p.cp == 1 or p.flash_attention):
        raise ConfigError("cp>1 needs flash_attention=true (context parallelism runs fused "
                          "attention on KV blocks)")
    if p.cp > 1 and p.cp_comm == CpComm.A2A and not (m.num_kv_heads // p.tp) % p.cp == 0:  # TE: heads split over cp
        raise ConfigError(f"cp_comm=a2a needs cp={p.cp} to divide the kv heads per TP rank="
                          f"{m.num_kv_heads // p.tp} (kv heads={m.num_kv_heads}, tp={p.tp}): the all-to-all splits "
                          "every rank's heads over the CP ranks")
    # causal load balancing splits the sequence into 2*cp chunks (Megatron-Core's context parallelism)
    if not (p.cp == 1 or p.seq_len % (2 * p.cp) == 0):
        raise ConfigError(f"2*cp=2*{p.cp} must divide seq_len={p.seq_len} (causal load balancing: 2*cp chunks)")
    if not (not p.sequence_parallel or p.tp > 1):
        raise ConfigError("sequence_parallel=true needs tp>1")
    if not (not p.sequence_parallel or p.tokens_per_rank % p.tp == 0):
        raise ConfigError(f"tp={p.tp} must divide the tokens per rank={p.tokens_per_rank} with sequence_parallel")
    if not (not p.tp_comm_overlap or (p.tp > 1 and p.sequence_parallel)):
        raise ConfigError("tp_comm_overlap=true needs tp>1 and sequence_parallel=true (the overlap splits the "
                          "all-gather and reduce-scatter of sequence parallelism)")
    if p.schedule == Schedule.INTERLEAVED:
        if not (p.pp > 1):
            raise ConfigError("schedule=interleaved needs pp>1")
        check_microbatch_group(p)
    elif p.microbatch_group_size_per_vp_stage:
        raise ConfigError(f"parallelism.microbatch_group_size_per_vp_stage={p.microbatch_group_size_per_vp_stage}: "
                          f"applies to schedule=interleaved, not {p.schedule.value} (set it to 0)")
    _check_sharding(p)
    _check_precision_and_graphs(m, p, cluster)

def _check_offload(m: ModelSpec, p: ParallelPlan, cluster: ClusterSpec) -> None:
    """Megatron-Core's TransformerConfig rules for --cpu-offloading (fewer layers than the model, no pipeline,
    no recompute), and a host link to price the copies on."""
    if not p.offload_layers:
        return
    if not p.offload_layers < m.num_layers:
        raise ConfigError(f"parallelism.offload_layers={p.offload_layers} must be below num_layers={m.num_layers} "
                          "(Megatron-Core's cpu_offloading_num_layers)")
    if p.pp > 1 or p.recompute != Recompute.NONE:
        raise ConfigError(f"parallelism.offload_layers={p.offload_layers} needs pp=1 and recompute=none (got "
                          f"pp={p.pp}, recompute={p.recompute.value}): Megatron-Core offloads neither under a "
                          "pipeline nor with activation recomputation")
    if cluster.gpu.host_link_gb_per_s is None:
        raise ConfigError(f"parallelism.offload_layers={p.offload_layers}: gpu={cluster.gpu.name} has no "
                          "host_link_gb_per_s to copy the activations over")


def _check_sharding(p: ParallelPlan) -> None:
    """ZeRO / FSDP: a stage with something to shard over, hybrid shard groups dividing dp, the parameter
    gather's overlap on the stages that gather."""
    stage = p.sharding_stage
    if not (stage < 3 or p.dp * p.cp > 1):
        raise ConfigError("zero_stage=3 needs dp*cp>1 (nothing to shard the parameters over)")
    if p.fsdp_shard_size:
        if not (stage >= 1):
            raise ConfigError(f"fsdp_shard_size={p.fsdp_shard_size} needs zero_stage>=1")
        if not (p.dp % p.fsdp_shard_size == 0):
            raise ConfigError(f"fsdp_shard_size={p.fsdp_shard_size} must divide dp={p.dp}: try {_divisors_hint(p.dp)}")
    if not (not p.overlap_param_gather or stage in (1, 2)):
        raise ConfigError("overlap_param_gather=true needs zero_stage 1 or 2 (Megatron's distributed optimizer)")


def _check_precision_and_graphs(m: ModelSpec, p: ParallelPlan, cluster: ClusterSpec) -> None:
    """The precision's peaks on this GPU, FP8 attention, recompute modules and CUDA graph scopes."""
    key = p.precision.peak_key
    if key not in cluster.gpu.peak_tflops:
        blackwell = "; mxfp8 and nvfp4 need a Blackwell GPU" if key in ("mxfp8", "nvfp4") else ""
        raise ConfigError(f"precision={p.precision} needs a {key} peak, which gpu={cluster.gpu.name} does not have "
                          f"({', '.join(sorted(cluster.gpu.peak_tflops))}){blackwell}")
    if p.precision.activation.value not in cluster.gpu.peak_tflops:
        raise ConfigError(f"precision={p.precision} keeps {p.precision.activation} activations, which "
                          f"gpu={cluster.gpu.name} has no peak for")
    if not (not p.fp8_attention or p.precision.low):
        raise ConfigError("fp8_attention=true needs a low precision (fp8, mxfp8, ...)")
    try:
        parse_recompute_modules(p.recompute_modules)
    except ValueError as e:
        raise ConfigError(f"parallelism.recompute_modules={p.recompute_modules}: {e}") from None
    try:
        scopes = parse_cuda_graph_scope(p.cuda_graph_scope)
    except ValueError as e:
        raise ConfigError(f"training.cuda_graph_scope={p.cuda_graph_scope}: {e}") from None
    whole = [x for x in scopes if x in ("moe", "full_iteration")]
    if whole and m.is_moe and m.capacity_factor is None:  # Megatron-Core: these scopes need drop-and-pad routing
        raise ConfigError(f"training.cuda_graph_scope={whole[0]} needs model.capacity_factor with a mixture of "
                          "experts: dropless routing syncs the host on each dispatch, which a CUDA graph cannot hold")


def check_pipeline_split(m: ModelSpec, p: ParallelPlan) -> None:
    """Layers over p·v positions: evenly, with a remainder spread from the first, or with explicit first /
    last stage counts whose rest divides over the other stages (:func:`vtrain.workload.partition.layer_split`)."""
    n = p.pp * (1 if p.schedule == Schedule.DUALPIPE else p.chunks)  # DualPipe: each direction is pp deep
    first, last = p.first_stage_layers, p.last_stage_layers
    if p.pipeline_layout:
        check_layout(m, p)
        return
    if first or last:
        if not (p.pp > 1):
            raise ConfigError("first_stage_layers / last_stage_layers need pp>1")
        if not (not (p.account_for_embedding or p.account_for_loss)):
            raise ConfigError("account_for_embedding / account_for_loss do not combine with first/last_stage_layers")
        if p.schedule in V_SHAPE:
            raise ConfigError(f"first_stage_layers / last_stage_layers do not apply to schedule={p.schedule.value}: "
                              "its V shape puts the first and the last layers on stage 0")
        per_stage = n // p.pp  # positions per stage (DualPipe: per direction's chain)
        fixed = [x for x in (first, last) if x]
        middle = p.pp - len(fixed)
        rest = m.num_layers - sum(fixed)
        if not (rest >= 0):
            raise ConfigError(f"first_stage_layers={first} + last_stage_layers={last} exceed the model's "
                              f"num_layers={m.num_layers}")
        if middle:
            if not (rest % (middle * per_stage) == 0 and rest > 0):
                raise ConfigError(f"first_stage_layers={first} / last_stage_layers={last} leave {rest} layers, "
                                  f"which must divide evenly over the other {middle} stage(s) x {per_stage} "
                                  "chunk(s)")
        else:
            if not (rest == 0):
                raise ConfigError(f"first_stage_layers={first} + last_stage_layers={last} must equal "
                                  f"num_layers={m.num_layers} with pp=2")
        if not (min(fixed) >= per_stage):
            raise ConfigError("each stage needs at least one layer per model chunk")
        return
    extra = int(p.account_for_embedding) + int(p.account_for_loss)
    if not (m.num_layers + extra >= n):
        raise ConfigError(f"pp*virtual_stages={p.pp}*{p.chunks}={n} exceeds the layers={m.num_layers}: every "
                          "position needs a layer")
    base, rem = divmod(m.num_layers + extra, n)
    first_pos = base + (1 if rem else 0) - int(p.account_for_embedding)
    last_pos = base - int(p.account_for_loss)  # the remainder goes to the first positions
    # a position holding the embedding or the loss may have no transformer layer (Megatron-Core builds an
    # empty decoder chunk there: the measured Qwen3 pp32 x vpp3 run over 94 + 2 layers does so)
    if not (first_pos >= (0 if p.account_for_embedding else 1) and last_pos >= (0 if p.account_for_loss else 1)
            and base >= 1):
        raise ConfigError(f"pp*virtual_stages={p.pp}*{p.chunks} leaves a pipeline position without a transformer layer")


def check_microbatch_group(p: ParallelPlan) -> None:
    """Megatron-Core's interleaved schedule (schedules.py, forward_backward_pipelining_with_interleaving): the
    group size N is in [pp, m], and the last group of m % N micro-batches is 0 or at least pp."""
    m, group = p.num_microbatches, p.microbatch_group
    if p.microbatch_group_size_per_vp_stage and not (p.pp <= group <= m):
        raise ConfigError(f"parallelism.microbatch_group_size_per_vp_stage={group}: must be in [pp={p.pp}, "
                          f"micro-batches={m}] (Megatron-Core's interleaved schedule)")
    rest = m % group
    if 0 < rest < p.pp:
        if not p.microbatch_group_size_per_vp_stage:
            raise ConfigError(f"pp={p.pp} must divide the number of micro-batches={m} with schedule=interleaved "
                              "(Megatron-Core runs them in groups of pp and refuses a remainder group smaller than "
                              "pp; parallelism.microbatch_group_size_per_vp_stage > pp admits other counts)")
        raise ConfigError(f"parallelism.microbatch_group_size_per_vp_stage={group}: leaves a last group of "
                          f"{m}%{group}={rest} micro-batches, which Megatron-Core refuses unless it is 0 or "
                          f">= pp={p.pp}")


def check_layout(m: ModelSpec, p: ParallelPlan) -> None:
    """Megatron-Core's explicit layout: its own rules (:func:`vtrain.workload.pipeline_layout.layout_layers`),
    on the schedules that run Megatron's order q = chunk*pp + stage, alone (it states where E and L sit)."""
    key = f"parallelism.pipeline_layout={p.pipeline_layout}"
    if p.schedule in TWO_CHUNKS:
        raise ConfigError(f"{key}: applies to Megatron's order q = chunk*pp + stage (1f1b, interleaved, "
                          f"zero_bubble, gpipe), not schedule={p.schedule.value}")
    if p.first_stage_layers or p.last_stage_layers or p.account_for_embedding or p.account_for_loss:
        raise ConfigError(f"{key}: does not combine with first/last_stage_layers or account_for_embedding/loss "
                          "(the layout states where every layer, the embedding and the loss sit)")
    layout_layers(p.pipeline_layout, m.num_layers, p.pp, p.chunks, m.mtp_layers)


def check_moe_plan(m: ModelSpec, p: ParallelPlan) -> None:
    """Expert parallelism (Megatron-Core's rules: etp*ep*edp = tp*dp*cp per stage) and the schedules that
    need a B/W split or two chunks."""
    check_expert_parallel(m, p)
    check_schedule(p.schedule, p.pp, p.num_microbatches)


def check_scale(p: ParallelPlan, cluster: ClusterSpec) -> None:
    """Physical plausibility across fields, with the bounds' reasons (:mod:`vtrain.workload.bounds`): the
    cluster's GPUs and the tokens of one batch (weights that fit the cluster: :func:`check_weights_fit`)."""
    if cluster.num_gpus > B.MAX_CLUSTER_GPUS:
        raise ConfigError(f"cluster.num_nodes={cluster.num_nodes}: x gpus_per_node={cluster.gpus_per_node} = "
                          f"{cluster.num_gpus:,} GPUs, more than {B.MAX_CLUSTER_GPUS:,} (~256x the 16,384 H100 "
                          "of Llama 3 405B's run, the largest published)")
    tokens = p.global_batch_size * p.seq_len
    if tokens > B.MAX_BATCH_TOKENS:
        raise ConfigError(f"training.global_batch_size={p.global_batch_size}: x seq_len={p.seq_len} = {tokens:,} "
                          f"tokens per batch, more than {B.MAX_BATCH_TOKENS:,} (~1,000x the 16M-token batch of "
                          "Llama 3 405B)")


def check_weights_fit(m: ModelSpec, cluster: ClusterSpec) -> bool:
    """The bf16 weights alone (2 bytes a parameter) must fit in the HBM of all the cluster's GPUs together
    (True where they do: the build memoises it)."""
    need = B.WEIGHT_BYTES_PER_PARAM * m.total_params()
    have = cluster.num_gpus * cluster.gpu.hbm_capacity_gib * GIB
    if need > have:
        raise ConfigError(f"model={m.name}: its {m.total_params() / 1e9:,.1f}B parameters need {need / GIB:,.0f} GiB "
                          f"at {B.WEIGHT_BYTES_PER_PARAM} bytes each, more than the {have / GIB:,.0f} GiB of all "
                          f"{cluster.num_gpus} GPUs of cluster {cluster.name}: choose a larger cluster")
    return True


def check_enums(schedule: str, recompute: str, precision: str) -> None:
    check_choice("parallelism.schedule", schedule, [s.value for s in Schedule])
    check_choice("parallelism.recompute", recompute, [r.value for r in Recompute])
    check_choice("training.precision", precision, [x.value for x in Precision])
