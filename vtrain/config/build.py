"""Turn a composed config into the typed values of the data flow: ModelSpec, ParallelPlan,
ClusterSpec and prices. All checks run here, before any simulation."""
from __future__ import annotations

from typing import Any, Mapping

from vtrain.config.validate import check_choice, check_enums, check_model, check_plan, check_positive, require
from vtrain.errors import ConfigError
from vtrain.workload.enums import CostModelKind, NormType, PositionEmbedding, Precision, Recompute, Schedule
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.system import GB, GIB, ClusterSpec, GpuSpec, NetworkTier
from vtrain.workload.workload import Workload


def _get(cfg: Any, key: str) -> Any:
    return cfg[key] if isinstance(cfg, Mapping) else getattr(cfg, key)


def model_spec(m: Any) -> ModelSpec:
    try:
        heads = int(_get(m, "num_heads"))
        kv = _get(m, "num_kv_heads")
        ffn = _get(m, "ffn_hidden_size")
        hidden = int(_get(m, "hidden_size"))
        check_choice("model.norm", _get(m, "norm"), [n.value for n in NormType])
        check_choice("model.position_embedding", _get(m, "position_embedding"),
                     [x.value for x in PositionEmbedding])
        spec = ModelSpec(
            name=str(_get(m, "name")), num_layers=int(_get(m, "num_layers")), hidden_size=hidden,
            num_heads=heads, num_kv_heads=int(kv) if kv is not None else heads,
            ffn_hidden_size=int(ffn) if ffn is not None else 4 * hidden,
            gated_mlp=bool(_get(m, "gated_mlp")), norm=NormType(_get(m, "norm")),
            position_embedding=PositionEmbedding(_get(m, "position_embedding")),
            use_bias=bool(_get(m, "use_bias")), dropout=float(_get(m, "dropout")),
            vocab_size=int(_get(m, "vocab_size")), vocab_divisible_by=int(_get(m, "vocab_divisible_by")),
            tied_embeddings=bool(_get(m, "tied_embeddings")),
            max_seq_len=int(_get(m, "max_seq_len")))
    except ConfigError:
        raise
    except Exception as exc:  # omegaconf MissingMandatoryValue and friends
        raise ConfigError(f"model: {exc}".splitlines()[0]) from None
    check_model(spec)
    return spec


def gpu_spec(g: Any) -> GpuSpec:
    check_positive(**{"gpu.hbm_capacity_gib": _get(g, "hbm_capacity_gib"),
                      "gpu.hbm_bandwidth_gb_per_s": _get(g, "hbm_bandwidth_gb_per_s"),
                      "gpu.gemm_max_efficiency": _get(g, "gemm_max_efficiency"),
                      "gpu.memory_efficiency": _get(g, "memory_efficiency")})
    return GpuSpec(
        name=str(_get(g, "name")), peak_tflops={str(k): float(v) for k, v in _get(g, "peak_tflops").items()},
        hbm_capacity_bytes=float(_get(g, "hbm_capacity_gib")) * GIB,
        hbm_bandwidth_bytes_per_s=float(_get(g, "hbm_bandwidth_gb_per_s")) * GB,
        num_sms=int(_get(g, "num_sms")),
        gemm_max_efficiency=float(_get(g, "gemm_max_efficiency")),
        gemm_half_efficiency_dim=float(_get(g, "gemm_half_efficiency_dim")),
        gemm_misaligned_efficiency=float(_get(g, "gemm_misaligned_efficiency")),
        attention_efficiency=float(_get(g, "attention_efficiency")),
        memory_efficiency=float(_get(g, "memory_efficiency")),
        kernel_time_s=float(_get(g, "kernel_time_s")),
        host_time_per_kernel_s=float(_get(g, "host_time_per_kernel_s")),
        host_time_per_collective_s=float(_get(g, "host_time_per_collective_s")),
        optimizer_bytes_per_param=float(_get(g, "optimizer_bytes_per_param")),
        iteration_overhead_s=float(_get(g, "iteration_overhead_s")),
        microbatch_overhead_s=float(_get(g, "microbatch_overhead_s")),
        memory_reserved_bytes=float(_get(g, "memory_reserved_gib")) * GIB)


def _tier(n: Any, field: str) -> NetworkTier:
    check_positive(**{f"{field}.bandwidth_gb_per_s": _get(n, "bandwidth_gb_per_s"),
                      f"{field}.efficiency": _get(n, "efficiency")})
    return NetworkTier(float(_get(n, "bandwidth_gb_per_s")) * GB, float(_get(n, "latency_s")),
                       float(_get(n, "step_latency_s")), float(_get(n, "efficiency")))


def cluster_spec(c: Any, gpu: GpuSpec, num_gpus: int | None = None) -> ClusterSpec:
    """``num_gpus`` (validation rows) resizes the cluster to at least that many GPUs."""
    gpn = int(_get(c, "gpus_per_node"))
    nodes = int(_get(c, "num_nodes"))
    check_positive(**{"cluster.gpus_per_node": gpn, "cluster.num_nodes": nodes})
    if num_gpus is not None and num_gpus > gpn * nodes:
        nodes = -(-num_gpus // gpn)
    return ClusterSpec(str(_get(c, "name")), gpu, gpn, nodes, _tier(_get(c, "intra_node"), "cluster.intra_node"),
                       _tier(_get(c, "inter_node"), "cluster.inter_node"))


def parallel_plan(par: Any, train: Any, cluster_gpus: int) -> ParallelPlan:
    check_enums(_get(par, "schedule"), _get(par, "recompute"), _get(train, "precision"))
    tp, pp, dp = int(_get(par, "tp")), int(_get(par, "pp")), int(_get(par, "dp"))
    check_positive(**{"parallelism.tp": tp, "parallelism.pp": pp})
    require(dp >= 0, f"parallelism.dp={dp} must be a positive number (or 0 to derive it)")
    if dp == 0:
        dp = cluster_gpus // (tp * pp)
        require(dp >= 1, f"tp*pp={tp * pp} exceeds the cluster's {cluster_gpus} GPUs")
    return ParallelPlan(
        tp=tp, pp=pp, dp=dp, micro_batch_size=int(_get(par, "micro_batch_size")),
        global_batch_size=int(_get(train, "global_batch_size")), seq_len=int(_get(train, "seq_len")),
        schedule=Schedule(_get(par, "schedule")), virtual_stages=int(_get(par, "virtual_stages")),
        recompute=Recompute(_get(par, "recompute")), sequence_parallel=bool(_get(par, "sequence_parallel")),
        distributed_optimizer=bool(_get(par, "distributed_optimizer")),
        overlap_grad_reduce=bool(_get(par, "overlap_grad_reduce")),
        grad_bucket_bytes=int(float(_get(par, "grad_bucket_mib")) * 2**20),
        precision=Precision(_get(train, "precision")), flash_attention=bool(_get(train, "flash_attention")))


def build_workload(cfg: Any) -> Workload:
    """Validated, typed inputs of one simulation from a composed config (DictConfig or dataclass)."""
    for key in ("model", "cluster"):
        try:
            node = _get(cfg, key)
        except Exception:
            node = None
        require(node is not None, f"{key} is not set: add +{key}=<name>")
    gpu_cfg = _get(cfg, "gpu")
    require(gpu_cfg is not None, f"gpu: no gpu config resolved for cluster.gpu={_get(cfg.cluster, 'gpu')} "
            "(compose with vtrain.compose or the CLI)")
    model = model_spec(cfg.model)
    gpu = gpu_spec(gpu_cfg)
    cluster = cluster_spec(cfg.cluster, gpu)
    plan = parallel_plan(cfg.parallelism, cfg.training, cluster.num_gpus)
    check_plan(model, plan, cluster)
    if plan.seq_len > model.max_seq_len and model.position_embedding == PositionEmbedding.LEARNED:
        raise ConfigError(f"training.seq_len={plan.seq_len} exceeds model.max_seq_len={model.max_seq_len} "
                          "(learned position embeddings)")
    prices = _get(cfg.pricing, "usd_per_gpu_hour")
    require(gpu.name in prices, f"pricing.usd_per_gpu_hour has no price for gpu={gpu.name} "
            f"(pricing={_get(cfg.pricing, 'name')})")
    tokens = float(_get(cfg.training, "tokens_to_train"))
    check_positive(**{"training.tokens_to_train": tokens})
    cost_kind = str(_get(cfg.cost, "model"))
    check_choice("cost.model", cost_kind, [k.value for k in CostModelKind])
    return Workload(model, plan, cluster, float(prices[gpu.name]), tokens, cost_kind)
