"""Turn one measured row into a Workload: the row's model, plan, GPU, stack and a cluster sized to its GPUs.

The one builder of measured rows (the shipped single-node CSV, the weak-scaling table, any user CSV).
Columns carry spec field names (``hidden_size``, ``tp``, ``precision``, ...; ``micro_batch`` and
``global_batch`` for the batch sizes); each cell is parsed to its field's type and checked against its
domain by :func:`vtrain.config.specs.spec_from`, so a bad cell names its row and column. What a row does
not say comes from its dataset's defaults (:class:`RowDefaults`): by default those of the vTrain
measurements (Megatron-DeepSpeed, fp16, full recompute, 1F1B, GPT blocks with LayerNorm, GeLU, learned
positions, tied embeddings, vocabulary 50257 unpadded — each TP rank holds 50257 // t rows, whose
alignment the measured output-layer times follow, README "Accuracy" — no DP overlap, no flash attention).
A row of a CSV of one's own takes the defaults of the stack it names (:func:`stack_defaults`), else those of
its GPU's era (:func:`era_defaults`). A gated MLP (``gated_mlp=true``) switches the model defaults to Llama's
(RMSNorm, RoPE, no biases, no dropout, untied output). ``schedule=interleaved`` without ``virtual_stages``
uses 2 chunks where layers divide; ``virtual_stages`` > 1 without a ``schedule`` is the interleaved schedule
(Megatron's VP). An empty ``tp`` or ``pp`` cell is 1, as an absent ``cp``, ``ep`` or ``virtual_stages``
column is.
A ``model`` column names a ``model/`` config whose fields fill every model column the row leaves empty (the
dataset's model defaults then do not apply); mixture-of-experts, MLA and MTP columns (``num_experts``,
``moe_top_k``, ``ep``, ``etp``, ``moe_dispatcher``, ``capacity_factor`` — ``none`` for dropless —, ...) are
spec fields like the others.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from vtrain.config.build import cluster_spec, gpu_spec, stack_spec
from vtrain.config.specs import spec_from
from vtrain.config.validate import check_model, check_plan
from vtrain.errors import ConfigError
from vtrain.validation.cells import _batches, _columns, _count, _fsdp_mixed_precision, _row_gpus, _sharding
from vtrain.validation.cells import parse_cell as parse_cell
from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.names import BARE_SIZE, STACK_ALIASES, STACK_MODEL_FAMILY
from vtrain.validation.names import _gpu_configs as _gpu_configs
from vtrain.validation.names import _stack_configs as _stack_configs
from vtrain.validation.names import _stack_key as _stack_key
from vtrain.validation.names import cell_number as cell_number
from vtrain.validation.names import enum_key as enum_key
from vtrain.validation.names import gpu_key as gpu_key
from vtrain.validation.names import model_name as model_name
from vtrain.validation.names import table_key as table_key
from vtrain.validation.names import zero_stage_cell as zero_stage_cell
from vtrain.workload.enums import MoeDispatcher, NormType, PositionEmbedding, Precision, Recompute, Schedule
from vtrain.workload.fields import POSITIVE_INT, check_value
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.workload import Workload

PLAN_ALIASES = {"micro_batch": "micro_batch_size", "global_batch": "global_batch_size"}
_MODEL_FIELDS = {f.name for f in fields(ModelSpec)} - {"name", "max_seq_len"}
_PLAN_FIELDS = {f.name for f in fields(ParallelPlan)} - {"tokens_to_train", "optimizer"}
LLAMA_MODEL = {"norm": NormType.RMSNORM, "position_embedding": PositionEmbedding.ROPE, "use_bias": False,
               "dropout": 0.0, "tied_embeddings": False}


@dataclass(frozen=True)
class RowDefaults:
    """What rows of one dataset leave unsaid (spec field values) and the stack they ran on."""

    model: Mapping[str, Any] = field(default_factory=lambda: {
        "norm": NormType.LAYERNORM, "position_embedding": PositionEmbedding.LEARNED, "use_bias": True,
        "dropout": 0.1, "vocab_size": 50257, "tied_embeddings": True, "vocab_divisible_by": 0})
    plan: Mapping[str, Any] = field(default_factory=lambda: {
        "schedule": Schedule.ONE_F_ONE_B, "recompute": Recompute.FULL, "sequence_parallel": False,
        "distributed_optimizer": False, "overlap_grad_reduce": False, "precision": Precision.FP16,
        "flash_attention": False})
    stack: str = "megatron_deepspeed_2022"
    sequence_parallel_with_tp: bool = False  # a row silent on sequence_parallel has it exactly when tp > 1
    # a row silent on them overlaps as NVIDIA's recipes do: the TP collectives with their GEMMs where tp > 1 with
    # sequence parallelism (Megatron-Bridge's default CommOverlapConfig(tp_comm_overlap=True); NeMo's
    # MegatronCommOverlapCallback(tp_comm_overlap=True) in its performance recipes), and the distributed
    # optimizer's parameter all-gather with the next forward when dp > 1 (the callback's optimizer overlap config)
    recipe_overlaps: bool = False
    # a row silent on recompute ran with the lightest mode that fits (it ran, so its memory fitted): the
    # validator tries these in order (:func:`vtrain.validation.run.validate_rows`); empty: plan's recompute
    recompute_to_fit: Tuple[Recompute, ...] = ()
    # the expert tensor-parallel degree of a mixture-of-experts row silent on etp: 0 is tp (Megatron-LM's
    # --expert-tensor-parallel-size default, arguments.py), 1 experts split by EP alone
    moe_etp: int = 0


# Modern runs (torchtitan, Megatron-Core): bf16, flash attention, DP overlapped, model shapes from model/;
# sequence parallelism whenever tp > 1 (torchtitan's TP plan puts SequenceParallel on every norm: there is no TP
# without it); experts unsplit by TP (torchtitan's parallelism.expert_tensor_parallel_degree defaults to 1)
MODERN_DEFAULTS = RowDefaults(
    model={"vocab_divisible_by": 128},
    plan={"schedule": Schedule.ONE_F_ONE_B, "recompute": Recompute.NONE, "precision": Precision.BF16,
          "flash_attention": True, "overlap_grad_reduce": True},
    stack="torchtitan_fsdp2", sequence_parallel_with_tp=True, moe_etp=1)
# A row of a CSV of one's own on a Hopper or Blackwell GPU: Megatron-Core with Transformer Engine, as NVIDIA's
# published recipes run it (NeMo / Megatron-Bridge: bf16, fused attention, distributed optimizer with
# overlapped gradient reduction, sequence parallelism whenever tp > 1, vocabulary padded to 128, gradients
# kept and reduced in bf16: NeMo's scripts/performance helpers set grad_reduce_in_fp32=False for every
# compute dtype, set_precision_configs; experts split by EP alone: every MoE base config of Megatron-Bridge's
# scripts/performance sets expert_tensor_parallel_size=1, as every row of the Megatron-MoE-ModelZoo table does)
MEGATRON_CORE_DEFAULTS = RowDefaults(
    model={"vocab_divisible_by": 128},
    plan={"schedule": Schedule.ONE_F_ONE_B, "recompute": Recompute.NONE, "precision": Precision.BF16,
          "flash_attention": True, "overlap_grad_reduce": True, "distributed_optimizer": True,
          "fp32_grads": False},
    stack="megatron_core_te", sequence_parallel_with_tp=True, recipe_overlaps=True,
    recompute_to_fit=(Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), moe_etp=1)


def era_defaults(gpu: Any) -> RowDefaults:
    """What a row of a CSV of one's own leaves unsaid, by the GPU it ran on: one without FP8 tensor cores
    (V100, A100) ran the software of vTrain's measurements (Megatron-DeepSpeed 2022, :class:`RowDefaults`),
    a Hopper or Blackwell GPU Megatron-Core with Transformer Engine (:data:`MEGATRON_CORE_DEFAULTS`)."""
    return MEGATRON_CORE_DEFAULTS if "fp8" in gpu.peak_tflops else RowDefaults()


# Megatron-LM's --DDP-impl (2021-2022): ``torch``, PyTorch's DistributedDataParallel, all-reduces its gradient
# buckets during the backward pass; ``local``, Megatron's own, after it (value: whether the reduction overlaps)
DDP_IMPLS = {"torch": True, "local": False}
# PyTorch DistributedDataParallel's default bucket_cap_mb (torch/nn/parallel/distributed.py), in MiB
TORCH_DDP_BUCKET_MIB = 25


def stack_name(row: MeasuredRow, stack: Optional[str], defaults: RowDefaults, pre_fp8: bool = False) -> str:
    """The row's stack: its ``stack`` column, else its ``framework`` column (names in :data:`STACK_ALIASES`;
    torchtitan with ``torch_compile`` true runs its compiled variant), else validate.stack, else the
    dataset's. A name that is no stack/ config is a one-line error naming the column and what it held."""
    column = "stack" if row.get("stack") else "framework"
    raw = row.get(column)
    if raw is None:
        return stack or defaults.stack
    name = _stack_key(table_key(raw).replace(".", "_"), pre_fp8)
    if name not in _stack_configs():
        raise ConfigError(f"row {row.index}: {column}={raw!r} names no stack; one of: "
                          f"{', '.join(_stack_configs())} (or {', '.join(sorted(STACK_ALIASES))})")
    compiled = row.get("torch_compile")
    if compiled is not None and parse_cell(row, "torch_compile", compiled, bool):
        return "torchtitan_fsdp2_compile" if name == "torchtitan_fsdp2" else name
    return name


def gpu_name(row: MeasuredRow, cluster_cfg: Any) -> str:
    """The row's ``gpu`` as a gpu/ config name (:func:`gpu_key`); else its ``system`` where that names a known GPU
    ("DGX-B200", "GB200 NVL72", "Selene"); else the cluster's GPU."""
    raw = row.get("gpu")
    if raw is None:
        system = row.get("system")
        known = gpu_key(system) if system is not None else ""
        return known if known in _gpu_configs() else str(cluster_cfg.gpu)
    return gpu_key(raw)


def _home_clusters() -> Dict[str, str]:
    """Each GPU's platform: the first cluster/ config (by name) built of it (the vTrain and CPU ones aside)."""
    from vtrain.config.compose import group_options

    return _homes(tuple(group_options("cluster")))


@functools.lru_cache(maxsize=4)
def _homes(clusters: Tuple[str, ...]) -> Dict[str, str]:
    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig

    homes: Dict[str, str] = {}
    for name in clusters:
        if name in ("vtrain_a100", "local_cpu"):
            continue
        homes.setdefault(str(load_group_config("cluster", name, ClusterConfig).gpu), name)
    return homes


@functools.lru_cache(maxsize=32)
def _home_cluster(name: str) -> Any:
    from vtrain.config.compose import load_group_config
    from vtrain.config.schema import ClusterConfig

    return load_group_config("cluster", name, ClusterConfig)


def row_cluster(row: MeasuredRow, cluster_cfg: Any) -> Any:
    """The cluster config a row ran on: ``cluster_cfg`` for a row of its GPU (or none stated), else the platform
    of the row's GPU (a GB200 row of a mixed table in an NVL72 rack), or of its other memory size (a100_40gb: the
    DGX A100 of a100_80gb), else ``cluster_cfg``'s fabric; the row's gpus_per_node and nvlink_domain on top."""
    gpu = gpu_name(row, cluster_cfg)
    if gpu == str(cluster_cfg.gpu):
        return cluster_cfg
    homes = _home_clusters()
    home = homes.get(gpu) or next((c for g, c in sorted(homes.items()) if g.split("_")[0] == gpu.split("_")[0]), None)
    return _home_cluster(home) if home else cluster_cfg


def stated_stack(row: MeasuredRow, stack: Optional[str], gpu: Any = None) -> Optional[str]:
    """The stack a row states: its ``stack`` or ``framework`` column (:func:`stack_name`; Megatron-LM by the
    era of ``gpu``, a GpuSpec: :data:`PRE_FP8_ALIASES`), else validate.stack, else llm-foundry's for a model
    named by its size alone (:data:`BARE_SIZE`: only llm-foundry's benchmark table names its models so); None
    when nothing says."""
    if row.get("stack") is not None or row.get("framework") is not None:
        return stack_name(row, None, RowDefaults(), gpu is not None and "fp8" not in gpu.peak_tflops)
    if stack:
        return stack
    return "llm_foundry_fsdp" if BARE_SIZE.fullmatch(table_key(str(row.get("model") or ""))) else None


def stack_defaults(name: str) -> Optional[RowDefaults]:
    """What a row of stack ``name`` leaves unsaid, whatever GPU it ran on: torchtitan's and llm-foundry's
    (:data:`MODERN_DEFAULTS`: bf16, flash attention, no recompute unless stated), Megatron-Core's as NVIDIA's
    recipes run it (:data:`MEGATRON_CORE_DEFAULTS`), Megatron-DeepSpeed 2022's (:class:`RowDefaults`); None
    for a stack without defaults of its own (its GPU's era decides)."""
    if name.startswith("torchtitan") or name == "llm_foundry_fsdp":
        return replace(MODERN_DEFAULTS, stack=name)
    if name == "megatron_core_te":
        return MEGATRON_CORE_DEFAULTS
    if name.startswith("megatron_deepspeed_2022") or name == "megatron_lm_2021":
        return replace(RowDefaults(), stack=name)
    return None


def defaults_of(row: MeasuredRow, cluster_cfg: Any, load_gpu: Callable[[str], Any],
                defaults: Optional[RowDefaults], stack: Optional[str] = None) -> RowDefaults:
    """The defaults that apply to ``row``: the dataset's, or (None) those of the stack the row states
    (:func:`stated_stack`, :func:`stack_defaults`: an llm-foundry row on A100 ran flash attention in bf16,
    not vTrain's fp16 Megatron-DeepSpeed), else those of the GPU it ran on (:func:`era_defaults`)."""
    if defaults is not None:
        return defaults
    gpu = gpu_spec(load_gpu(gpu_name(row, cluster_cfg)))
    given = stated_stack(row, stack, gpu)
    own = stack_defaults(given) if given is not None else None
    return own if own is not None else era_defaults(gpu)


def model_config_fields(name: str) -> Dict[str, Any]:
    """The fields of ``model/<name>.yaml`` (checked against the model schema), as a plain mapping."""
    from vtrain.config.build import as_mapping
    from vtrain.config.compose import check_config_name, load_group_config
    from vtrain.config.schema import ModelConfig

    check_config_name("model", name)
    return {k: v for k, v in as_mapping(load_group_config("model", name, ModelConfig)).items() if v is not None}


def states_recompute(row: MeasuredRow) -> bool:
    """Whether the row says how it recomputed: a mode, or Megatron's layer count or modules, which imply one."""
    return any(row.get(c) is not None for c in ("recompute", "recompute_num_layers", "recompute_modules"))


def _row_model(row: MeasuredRow, m: Dict[str, Any], seq_len: int, defaults: RowDefaults, stack_name_: str,
               prefix: str) -> ModelSpec:
    """The row's model: its ``model`` column's model/ config (llm-foundry's bare sizes as MPT shapes) under the
    row's shape columns, else the shape columns over the dataset's model defaults (Llama's with a gated MLP)."""
    base: Dict[str, Any] = {}
    sized = BARE_SIZE.fullmatch(table_key(str(row.get("model") or "")))
    if row.get("model"):
        raw_model = str(row.get("model"))
        family = STACK_MODEL_FAMILY.get(stack_name_)
        try:
            base = model_config_fields(f"{family}_{sized.group(0)}" if sized and family else model_name(raw_model))
        except ConfigError:
            if not all(f in m for f in ("num_layers", "hidden_size", "num_heads")):
                from vtrain.config.compose import group_options

                raise ConfigError(f"{prefix} model={raw_model!r} names no model/ config and the row does not "
                                  "give num_layers, hidden_size and num_heads; one of: "
                                  f"{', '.join(group_options('model'))}") from None
            base = {}  # the row gives the shape: the model column is its label ("GPT 1008.0B")
        if base:
            base["name"] = base.get("name") or row.get("model")
    for required in ("num_layers", "hidden_size", "num_heads"):
        if required not in m and required not in base:
            raise ConfigError(f"{prefix} {required} is empty")
    if base:
        model_d = {**base, **m}
        model_d["max_seq_len"] = max(int(model_d.get("max_seq_len", 1)), seq_len)
    else:
        model_d = {**defaults.model, **(LLAMA_MODEL if m.get("gated_mlp") else {}), **m}
        model_d["max_seq_len"] = seq_len
    model_d.setdefault("num_kv_heads", model_d["num_heads"])
    model_d.setdefault("ffn_hidden_size", 4 * model_d["hidden_size"])
    model_d["name"] = (row.get("name") or model_d.get("name") or row.get("model")
                       or f"gpt-h{model_d['hidden_size']}-l{model_d['num_layers']}")
    model = spec_from(ModelSpec, model_d, prefix)
    check_model(model)
    return model


def _stated_plan(row: MeasuredRow, p: Dict[str, Any], model: ModelSpec, stack_spec_: Any) -> None:
    """The plan cells the row states in other words, set in ``p`` (dispatcher backend, sharding, Composer's
    mp_mode, uniform recompute), and the stack's own ZeRO stage and per-op selective recompute."""
    backend = str(row.get("moe_flex_dispatcher_backend") or "").lower()  # the flex dispatcher's, unless named
    if model.is_moe and backend and p.get("moe_dispatcher") in (None, MoeDispatcher.DEEPEP):
        p["moe_dispatcher"] = MoeDispatcher.HYBRIDEP if "hybrid" in backend else MoeDispatcher.DEEPEP
    if not model.is_moe and p.get("ep", 1) == 1:  # a dense row's "EP 1, ETP 1": no experts to place
        p.pop("ep", None)
        p.pop("etp", None)
    p.update(_sharding(row, p, given_stage="zero_stage" in p))
    p.update(_fsdp_mixed_precision(row, given="fp32_grads" in p))
    method = row.get("recompute_method")  # Megatron's --recompute-method: block keeps the count's meaning
    uniform = "uniform" in table_key(str(row.get("recompute") or "")).split("_")  # "Full (uniform)"
    if uniform or (method is not None and table_key(str(method)) == "uniform"):  # groups of N, every layer again
        p.pop("recompute_num_layers", None)
    if "zero_stage" not in p and stack_spec_.zero_stage is not None:  # FSDP stacks shard unless told otherwise
        p["zero_stage"] = stack_spec_.zero_stage
    if p.get("recompute") == Recompute.SELECTIVE and stack_spec_.selective_is_per_op:  # torchtitan's "selective"
        p["recompute"] = Recompute.SELECTIVE_OP
    if p.get("zero_stage") == 0 and "distributed_optimizer" not in p:  # "ZeRO 0": no sharded optimizer either
        p["distributed_optimizer"] = False


def _unstated_plan(row: MeasuredRow, p: Dict[str, Any], plan_d: Dict[str, Any], model: ModelSpec,
                   defaults: RowDefaults, stack_name_: str, prefix: str) -> None:
    """What the row leaves unsaid, set in ``plan_d`` from its defaults: gradient dtype, expert TP, sequence
    parallelism and TP overlap, Megatron-LM's DDP implementation, the interleaved schedule's chunks."""
    if "fp32_grads" not in p and stack_name_ != defaults.stack:  # NVIDIA's recipes' bf16 gradients are theirs:
        plan_d.pop("fp32_grads", None)  # torchtitan (reduce_dtype fp32) and DeepSpeed accumulate in fp32
    if model.is_moe and "etp" not in p and defaults.moe_etp:
        plan_d["etp"] = defaults.moe_etp
    if defaults.sequence_parallel_with_tp and "sequence_parallel" not in p:
        plan_d["sequence_parallel"] = plan_d.get("tp", 1) > 1
    if defaults.recipe_overlaps and "tp_comm_overlap" not in p:
        plan_d["tp_comm_overlap"] = bool(plan_d.get("sequence_parallel")) and plan_d.get("tp", 1) > 1
    ddp = row.get("ddp_impl")  # Megatron-LM's --DDP-impl (2021-2022)
    if ddp is not None and "overlap_grad_reduce" not in p:
        key = table_key(ddp)
        if key not in DDP_IMPLS:
            raise ConfigError(f"{prefix} ddp_impl={ddp} is not one of {', '.join(DDP_IMPLS)}")
        plan_d["overlap_grad_reduce"] = DDP_IMPLS[key]
        if DDP_IMPLS[key] and "grad_bucket_mib" not in p:
            plan_d["grad_bucket_mib"] = TORCH_DDP_BUCKET_MIB
    per_stage = row.get("layers_per_virtual_stage")  # Megatron's --num-layers-per-virtual-pipeline-stage
    if per_stage is not None and "virtual_stages" not in p:
        n, pp_ = int(parse_cell(row, "layers_per_virtual_stage", per_stage, int)), int(plan_d.get("pp", 1))
        check_value(f"{prefix} layers_per_virtual_stage", n, POSITIVE_INT)
        if model.num_layers % (pp_ * n):
            raise ConfigError(f"{prefix} layers_per_virtual_stage={n} x pp={pp_} must divide num_layers="
                              f"{model.num_layers}")
        p["virtual_stages"] = plan_d["virtual_stages"] = model.num_layers // (pp_ * n)
    if p.get("virtual_stages", 1) > 1 and "schedule" not in p:  # VP > 1 is Megatron's interleaved 1F1B
        plan_d["schedule"] = Schedule.INTERLEAVED
    if "virtual_stages" not in p:  # interleaved without a chunk count: 2 where the layers allow
        interleaved = plan_d.get("schedule") == Schedule.INTERLEAVED
        plan_d["virtual_stages"] = 2 if interleaved and model.num_layers % (2 * plan_d.get("pp", 1)) == 0 else 1


def _row_cluster_spec(row: MeasuredRow, cluster_cfg: Any, gpu: Any, num_gpus: int) -> Any:
    """The cluster of the row's GPUs on its platform, with the row's GPUs per node and NVLink domain."""
    cluster = cluster_spec(cluster_cfg, gpu, num_gpus)
    per_node = _count(row, "gpus_per_node")
    if per_node is not None:
        cluster = replace(cluster, gpus_per_node=per_node, num_nodes=-(-num_gpus // per_node))
    domain = _count(row, "nvlink_domain")
    if domain is not None:
        cluster = replace(cluster, nvlink_domain=domain)
    return cluster


def row_workload(row: MeasuredRow, cluster_cfg: Any, load_gpu: Callable[[str], Any],
                 load_stack: Callable[[str], Any], defaults: Optional[RowDefaults] = RowDefaults(),
                 stack: Optional[str] = None, recompute: Optional[Mapping[str, Any]] = None) -> Workload:
    """The workload of one measured row on the ``cluster`` config (resized to the row's GPUs): ``stack``
    (validate.stack) overrides the dataset's stack for rows without a ``stack`` column; ``defaults`` None:
    those of the stack the row names, else of its GPU (:func:`defaults_of`); ``recompute`` (plan settings:
    ``recompute``, ``recompute_modules``, ``recompute_num_layers``) replaces the defaults' recompute settings
    for a row without a ``recompute`` column. Raises ConfigError (the skip reason) when the row cannot be
    simulated as measured."""
    prefix = f"row {row.index}:"
    if (row.get("global_batch") or "").strip() == "-1":  # torchtitan's default: local batch x dp (x accumulation)
        row = MeasuredRow(row.index, {k: v for k, v in row.values.items() if k != "global_batch"})
    gpu = gpu_spec(load_gpu(gpu_name(row, cluster_cfg)))
    defaults = defaults_of(row, cluster_cfg, load_gpu, defaults, stack)
    cluster_cfg = row_cluster(row, cluster_cfg)
    m = _columns(row, _MODEL_FIELDS, ModelSpec, {})
    p = _columns(row, _PLAN_FIELDS, ParallelPlan, PLAN_ALIASES)
    if "recompute" not in p and p.get("recompute_num_layers"):  # Megatron's --recompute-num-layers: granularity full
        p["recompute"] = Recompute.FULL
    elif "recompute" not in p and "recompute_modules" in p:  # --recompute-modules: granularity selective
        p["recompute"] = Recompute.SELECTIVE
    stack_name_ = stated_stack(row, stack, gpu) or defaults.stack
    model = _row_model(row, m, p.get("seq_len", 1), defaults, stack_name_, prefix)
    stack_spec_ = stack_spec(load_stack(stack_name_))
    _stated_plan(row, p, model, stack_spec_)
    plan_d = {**defaults.plan, **(recompute if recompute is not None and "recompute" not in p else {}), **p}
    _unstated_plan(row, p, plan_d, model, defaults, stack_name_, prefix)
    given_gpus = _row_gpus(row, cluster_cfg)
    if "dp" not in plan_d and given_gpus is not None:  # the data-parallel degree the GPUs leave
        split = plan_d.get("tp", 1) * plan_d.get("pp", 1) * plan_d.get("cp", 1)
        if given_gpus % split:
            raise ConfigError(f"{prefix} dp is empty and tp*cp*pp={split} does not divide num_gpus={given_gpus}")
        plan_d["dp"] = given_gpus // split
    plan_d.update(_batches(row, plan_d, prefix))
    # tp and pp: an empty cell is 1 (that parallelism unused), as for cp, ep and virtual_stages
    for required in ("dp", "micro_batch_size", "global_batch_size", "seq_len"):
        if required not in plan_d:
            raise ConfigError(f"{prefix} {required} is empty")
    plan = spec_from(ParallelPlan, plan_d, prefix)
    if defaults.recipe_overlaps and "overlap_param_gather" not in p and plan.dp > 1 and plan.sharding_stage in (1, 2):
        plan = replace(plan, overlap_param_gather=True)
    num_gpus = given_gpus if given_gpus is not None else plan.num_gpus
    if plan.num_gpus != num_gpus:
        product = "tp*cp*pp*dp" if plan.cp > 1 else "tp*dp*pp"
        raise ConfigError(f"{prefix} {product}={plan.num_gpus} differs from num_gpus={num_gpus}")
    cluster = _row_cluster_spec(row, cluster_cfg, gpu, num_gpus)
    check_plan(model, plan, cluster)
    return Workload(model=model, plan=plan, cluster=cluster, stack=stack_spec_, usd_per_gpu_hour=0.0)
