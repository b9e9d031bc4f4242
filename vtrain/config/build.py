"""Turn a composed config into the typed values of the data flow: ModelSpec, ParallelPlan, ClusterSpec,
StackSpec and prices. All checks run here, before any simulation (field domains in
:func:`vtrain.config.specs.spec_from`, cross-field rules in :mod:`vtrain.config.validate`)."""
from __future__ import annotations

import typing
from dataclasses import replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from vtrain.config.specs import spec_from
from vtrain.config.validate import check_choice, check_model, check_plan, check_scale, check_weights_fit, require
from vtrain.errors import ConfigError
from vtrain.workload.enums import CostModelKind, PositionEmbedding
from vtrain.workload.fields import check_value
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import PAR, TRAIN, ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.system import ClusterSpec, GpuSpec
from vtrain.workload.workload import (
    GRID_KG_CO2_PER_KWH,
    KG_CO2_PER_KWH_RANGE,
    USD_PER_GPU_HOUR,
    USD_PER_KWH,
    USD_PER_KWH_RANGE,
    Workload,
)

T = TypeVar("T")


class _NeedsOmegaConf(Exception):
    """A node the fast walk does not handle (an interpolation, a missing or None container)."""


def _plain(node: Any) -> Any:
    """A config node's plain value without OmegaConf's per-node machinery (several times faster than
    ``OmegaConf.to_container`` on a cluster group), the same result for nodes without interpolations;
    anything else raises _NeedsOmegaConf."""
    content = node.__dict__.get("_content", _NO_CONTENT)
    if isinstance(content, dict):
        return {str(k): _plain(v) for k, v in content.items()}
    if isinstance(content, list):
        return [_plain(v) for v in content]
    if content is not _NO_CONTENT:  # a None / missing container
        raise _NeedsOmegaConf
    return _leaf(node)[1]


_NO_CONTENT = object()


def content_key(node: Any) -> Any:
    """A hashable fingerprint of a config node's content: leaves as (key, type, value), so that ``True``,
    ``1`` and ``1.0`` differ, containers as (key, fingerprint); the same fast walk as :func:`_plain`
    (raises _NeedsOmegaConf where it does)."""
    content = node.__dict__.get("_content", _NO_CONTENT)
    if type(content) is dict:
        items = content.items()
    elif type(content) is list:
        items = enumerate(content)  # type: ignore[assignment]
    elif content is _NO_CONTENT:
        return (None, *_leaf(node))
    else:  # a None / missing container
        raise _NeedsOmegaConf
    out: List[Any] = [type(content)]
    for k, v in items:
        vd = v.__dict__
        out.append((k, *_leaf(v)) if "_val" in vd else (k, content_key(v)))
    return tuple(out)


def _leaf(node: Any) -> Tuple[type, Any]:
    value = node.__dict__.get("_val", _NO_CONTENT)
    if value is _NO_CONTENT or (type(value) is str and ("${" in value or value == "???")):
        raise _NeedsOmegaConf
    return type(value), value


_MEMO: Dict[Any, Any] = {}  # content key -> typed value: one config group's build is a pure function of it
_MEMO_MAX = 256


def fingerprint(node: Any) -> Any:
    """:func:`content_key` of a DictConfig node, or None where there is none (an interpolation, a plain
    mapping or dataclass config): such a node is built anew on every call (so is one with an unhashable
    leaf, see :func:`_memoised`)."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig):
        return None
    try:
        return content_key(node)
    except _NeedsOmegaConf:
        return None


def _memoised(key: Optional[Tuple[Any, ...]], build: Callable[[], T]) -> T:
    """``build()``, reused while ``key`` (a tag and the fingerprints of the config nodes it reads; None when
    one has none) is the same: a sweep over one group rebuilds only that group. Errors are not memoised: a
    bad value raises on every call."""
    if key is None or any(part is None for part in key):
        return build()
    try:
        hit = _MEMO.get(key)
    except TypeError:  # an unhashable leaf
        return build()
    if hit is None:
        hit = build()
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = hit
    return typing.cast(T, hit)


def clear_memo() -> None:
    """Forget every memoised group (benchmarks of a config never seen before, tests)."""
    _MEMO.clear()


def as_mapping(node: Any) -> Dict[str, Any]:
    """A config group as a plain dict (a DictConfig resolved, a dataclass instance, or a mapping)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(node, DictConfig):
        try:
            fast = _plain(node)
            assert isinstance(fast, dict)
            return fast
        except _NeedsOmegaConf:
            pass
        try:
            out = OmegaConf.to_container(node, resolve=True)
        except Exception as exc:  # an interpolation that does not resolve, a missing value
            raise ConfigError(str(exc).strip().splitlines()[0]) from None
        assert isinstance(out, dict)
        return {str(k): v for k, v in out.items()}
    if isinstance(node, Mapping):
        return dict(node)
    if hasattr(node, "__dataclass_fields__"):
        return {k: getattr(node, k) for k in node.__dataclass_fields__}
    raise ConfigError(f"expected a config mapping, got {type(node).__name__}")


def model_spec(m: Any) -> ModelSpec:
    d = as_mapping(m)
    if d.get("num_kv_heads") is None:
        d["num_kv_heads"] = d.get("num_heads")
    if d.get("ffn_hidden_size") is None and isinstance(d.get("hidden_size"), int):
        d["ffn_hidden_size"] = 4 * d["hidden_size"]
    spec = spec_from(ModelSpec, d, "model")
    check_model(spec)
    return spec


def gpu_spec(g: Any) -> GpuSpec:
    """A gpu config as a GpuSpec; a peak of 0 in ``peak_tflops`` says the GPU has no such unit (a config
    that inherits another GPU's peaks drops them so: V100 has no bf16)."""
    fields = dict(as_mapping(g))
    if isinstance(fields.get("peak_tflops"), Mapping):
        fields["peak_tflops"] = {k: v for k, v in fields["peak_tflops"].items() if v != 0}
    gpu = spec_from(GpuSpec, fields, "gpu")
    require(gpu.idle_w <= gpu.tdp_w, f"gpu.idle_w={gpu.idle_w:g} must be <= gpu.tdp_w={gpu.tdp_w:g} "
            "(an idle GPU draws less than its power limit)")
    return gpu


def stack_spec(s: Any) -> StackSpec:
    return spec_from(StackSpec, as_mapping(s), "stack")


def cluster_spec(c: Any, gpu: GpuSpec, num_gpus: Optional[int] = None) -> ClusterSpec:
    """``num_gpus`` (validation rows) resizes the cluster to at least that many GPUs."""
    cluster = spec_from(ClusterSpec, as_mapping(c), "cluster", gpu=gpu)
    if num_gpus is not None and num_gpus > cluster.num_gpus:
        cluster = replace(cluster, num_nodes=-(-num_gpus // cluster.gpus_per_node))
    return cluster


def parallel_plan(par: Any, train: Any, cluster_gpus: int) -> ParallelPlan:
    p = spec_from(ParallelPlan, as_mapping(par), "parallelism", group=PAR)
    plan = spec_from(ParallelPlan, as_mapping(train), "training", group=TRAIN,
                     **{k: getattr(p, k) for k in ParallelPlan.__dataclass_fields__
                        if ParallelPlan.__dataclass_fields__[k].metadata.get("group") == PAR})
    if plan.dp == 0:  # the GPUs left over tp, cp and pp (GPUs = tp*cp*pp*dp)
        split = plan.tp * plan.cp * plan.pp
        dp = cluster_gpus // split
        require(dp >= 1, f"tp*cp*pp={split} exceeds the cluster's {cluster_gpus} GPUs")
        plan = replace(plan, dp=dp)
    if plan.tp == 1 and (plan.sequence_parallel or plan.tp_comm_overlap):
        # nothing to split: Megatron-LM turns both off at tp=1 (arguments.py, "Disabling sequence parallelism
        # because tensor model parallel size is 1"), so the defaults' sequence_parallel=true suits any tp
        plan = replace(plan, sequence_parallel=False, tp_comm_overlap=False)
    return plan


def _node(cfg: Any, key: str) -> Any:
    """A child of a config: a group node without OmegaConf's attribute machinery where it is a plain
    container (several microseconds a lookup), else through it (interpolations, None, dataclasses)."""
    content = getattr(cfg, "__dict__", {}).get("_content")
    if isinstance(content, dict):
        child = content.get(key)
        if isinstance(getattr(child, "__dict__", {}).get("_content"), dict):
            return child
    try:
        return cfg[key] if isinstance(cfg, Mapping) else getattr(cfg, key)
    except Exception:
        return None


_GROUPS = ("model", "gpu", "stack", "cluster", "parallelism", "training", "pricing", "cost")


def build_workload(cfg: Any) -> Workload:
    """Validated, typed inputs of one simulation from a composed config (DictConfig or dataclass); the
    typed value of each group is reused while its content is unchanged (:func:`_memoised`)."""
    nodes = tuple(_node(cfg, g) for g in _GROUPS)
    for key in ("model", "cluster", "stack"):
        if nodes[_GROUPS.index(key)] is None:
            raise ConfigError(f"{key} is not set: add +{key}=<name>")
    if nodes[1] is None:
        raise ConfigError(f"gpu: no gpu config resolved for cluster.gpu={_node(cfg.cluster, 'gpu')} "
                          "(compose with vtrain.compose or the CLI)")
    keys = tuple(fingerprint(n) for n in nodes)  # each group's once: the group memos below reuse them
    return _memoised(("workload", *keys), lambda: _build(nodes, keys))


def _build(nodes: Tuple[Any, ...], keys: Tuple[Any, ...]) -> Workload:
    model_cfg, gpu_cfg, stack_cfg, cluster_cfg, par_cfg, train_cfg, pricing_cfg, cost_cfg = nodes
    k_model, k_gpu, k_stack, k_cluster, k_par, k_train = keys[:6]
    model = _memoised(("model", k_model), lambda: model_spec(model_cfg))
    gpu = _memoised(("gpu", k_gpu), lambda: gpu_spec(gpu_cfg))
    stack = _memoised(("stack", k_stack), lambda: stack_spec(stack_cfg))
    cluster = _memoised(("cluster", k_cluster, k_gpu), lambda: cluster_spec(cluster_cfg, gpu))
    _memoised(("fits", k_model, k_gpu, k_cluster), lambda: check_weights_fit(model, cluster))
    plan = _memoised(("plan", k_par, k_train, k_cluster), lambda: parallel_plan(par_cfg, train_cfg, cluster.num_gpus))
    check_scale(plan, cluster)
    check_plan(model, plan, cluster)
    if plan.seq_len > model.max_seq_len and model.position_embedding == PositionEmbedding.LEARNED:
        raise ConfigError(f"training.seq_len={plan.seq_len} exceeds model.max_seq_len={model.max_seq_len} "
                          "(learned position embeddings)")
    pricing = as_mapping(pricing_cfg)
    prices = pricing.get("usd_per_gpu_hour") or {}
    require(gpu.name in prices, f"pricing.usd_per_gpu_hour has no price for gpu={gpu.name} "
            f"(pricing={pricing.get('name')})")
    usd = prices[gpu.name]
    check_value(f"pricing.usd_per_gpu_hour.{gpu.name}", usd, USD_PER_GPU_HOUR)
    cost_kind = str(_node(cost_cfg, "model"))
    check_choice("cost.model", cost_kind, [k.value for k in CostModelKind])
    energy = {}
    for key, default, domain in (("usd_per_kwh", USD_PER_KWH, USD_PER_KWH_RANGE),
                                 ("grid_kg_co2_per_kwh", GRID_KG_CO2_PER_KWH, KG_CO2_PER_KWH_RANGE)):
        value = pricing.get(key, default)
        check_value(f"pricing.{key}", value, domain)
        energy[key] = float(value)
    include_energy = pricing.get("include_energy", False)
    require(isinstance(include_energy, bool), f"pricing.include_energy={include_energy} must be true or false")
    return Workload(model=model, plan=plan, cluster=cluster, stack=stack, usd_per_gpu_hour=float(usd),
                    cost_model=cost_kind, include_energy=include_energy, **energy)
