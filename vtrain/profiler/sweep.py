"""The profile sweep: every op of the simulator's graph at every (hidden × tp × micro-batch × seq ×
attention path) point, plus the Adam step over model sizes. Returns plain rows (profiles/README.md).

The ops come from :func:`vtrain.graph.builder.build_model_graph` itself, so the profile has exactly
the ops, names and shard shapes the simulator prices. Each distinct (op, variant, shape) is timed
once; rows carry every shape parameter and the dtype and device, so no two shapes share a key.
"""
from __future__ import annotations

import dataclasses
import gc
import sys
from dataclasses import dataclass
from statistics import median
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from vtrain.comm.tp import plan_tp_comms
from vtrain.cost.profiled import ADAM, op_variant
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective, FlashAttention, Gemm
from vtrain.profiler.model import build_model, make_optimizer
from vtrain.profiler.ops import Point, benchmark, largest_tensor_bytes
from vtrain.profiler.timing import Timing, time_op
from vtrain.workload.enums import Precision
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan


@dataclass(frozen=True)
class Sweep:
    micro_batch_sizes: Sequence[int]
    seq_lens: Sequence[int]
    hidden_sizes: Sequence[int]
    tp_shards: Sequence[int]
    attention: Sequence[str]  # "flash" and/or "unfused"
    adam_layers: Sequence[int]
    warmup: int = 3
    repeats: int = 10
    min_sample_s: float = 0.0
    max_tensor_bytes: float = 8 * 2**30
    clock: str = "wall"  # on cpu: cpu | wall (see timing.py)
    cold_ops: bool = False  # on cpu: evict the caches before each sample of an op (Adam: always)


def scaled_model(model: ModelSpec, hidden: int) -> ModelSpec:
    """The model at another hidden size: head_dim, the kv/q head ratio and the ffn/hidden ratio kept."""
    if hidden == model.hidden_size:
        return model
    d = model.head_dim
    if hidden % d:
        raise ValueError(f"profile.hidden_sizes: {hidden} is not a multiple of head_dim={d}")
    heads = hidden // d
    group = model.num_heads // model.num_kv_heads
    kv = max(1, heads // group)
    ffn = int(round(model.ffn_hidden_size * hidden / model.hidden_size))
    return dataclasses.replace(model, hidden_size=hidden, num_heads=heads, num_kv_heads=kv, ffn_hidden_size=ffn)


def _shape(model: ModelSpec, plan: Optional[ParallelPlan], layers: int = 0) -> Dict[str, int]:
    return {"micro_batch": plan.micro_batch_size if plan else 0, "seq_len": plan.seq_len if plan else 0,
            "hidden": model.hidden_size, "tp": plan.tp if plan else 1, "heads": model.num_heads,
            "kv_heads": model.num_kv_heads, "head_dim": model.head_dim, "ffn": model.ffn_hidden_size,
            "vocab": model.vocab_size, "layers": layers}


def _row(op: Any, variant: str, dtype: str, device: str, shape: Dict[str, int], t: Timing) -> Dict[str, Any]:
    m = n = k = batch = 0
    if isinstance(op, Gemm):
        m, n, k, batch = op.m, op.n, op.k, op.batch
    elif isinstance(op, FlashAttention):
        m, k, batch = op.seq_len, op.head_dim, op.batch_heads
    return {"op": op.name, "variant": variant, "dtype": dtype, "device": device, **shape, "m": m, "n": n, "k": k,
            "batch": batch, "flops": float(op.flops), "bytes": float(op.bytes), "params": 0,
            "samples": t.samples, "median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "host_s": t.host_s}


def _free(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def profile_ops(model: ModelSpec, sweep: Sweep, dev: torch.device, dtype_name: str,
                log: Callable[[str], None] = print) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Time every graph op over the sweep. Returns (rows, notes about skipped points)."""
    from vtrain.profiler.device import torch_dtype

    dtype = torch_dtype(dtype_name)
    rows: List[Dict[str, Any]] = []
    notes: List[str] = []
    seen: set = set()
    for hidden in sweep.hidden_sizes:
        spec = scaled_model(model, hidden)
        for t in sweep.tp_shards:
            if spec.num_heads % t or spec.num_kv_heads % t or spec.ffn_hidden_size % t:
                notes.append(f"hidden={hidden} tp={t}: tp does not divide heads/ffn, skipped")
                continue
            for b in sweep.micro_batch_sizes:
                for s in sweep.seq_lens:
                    for path in sweep.attention:
                        plan = ParallelPlan(tp=t, pp=1, dp=1, micro_batch_size=b, global_batch_size=b, seq_len=s,
                                            precision=Precision(dtype_name), flash_attention=(path == "flash"))
                        pt = Point(spec, plan, dev, dtype)
                        graph = build_model_graph(spec, plan, plan_tp_comms(spec, plan))
                        n_before = len(rows)
                        for comp in (graph.embedding, graph.layer, graph.head):
                            for ops in (comp.forward, comp.backward):
                                for op in ops.ops:
                                    if isinstance(op, Collective):
                                        continue
                                    variant = op_variant(op.name, spec)
                                    key = (op.name, variant, op.flops, op.bytes,
                                           getattr(op, "m", 0), getattr(op, "n", 0), getattr(op, "k", 0),
                                           getattr(op, "batch", getattr(op, "batch_heads", 0)))
                                    if key in seen:
                                        continue
                                    seen.add(key)
                                    if largest_tensor_bytes(op, pt) > sweep.max_tensor_bytes:
                                        notes.append(f"{op.name} at h={hidden} tp={t} b={b} s={s}: larger than "
                                                     f"profile.max_tensor_gib, skipped")
                                        continue
                                    fn = benchmark(op, pt)
                                    timing = time_op(fn, dev, sweep.warmup, sweep.repeats, sweep.min_sample_s,
                                                     clock=sweep.clock, cold=sweep.cold_ops)
                                    rows.append(_row(op, variant, dtype_name, dev.type, _shape(spec, plan), timing))
                                    del fn
                        _free(dev)
                        log(f"  h={hidden} tp={t} b={b} s={s} {path}: {len(rows) - n_before} ops timed")
    return rows, notes


def profile_adam(model: ModelSpec, sweep: Sweep, dev: torch.device, dtype_name: str,
                 log: Callable[[str], None] = print) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Time ``optimizer.step()`` on the parameters of the model with each hidden size and layer count."""
    from vtrain.profiler.device import memory_gib, torch_dtype

    dtype = torch_dtype(dtype_name)
    elem = torch.finfo(dtype).bits // 8
    rows: List[Dict[str, Any]] = []
    notes: List[str] = []
    for hidden in sweep.hidden_sizes:
        for layers in sweep.adam_layers:
            spec = dataclasses.replace(scaled_model(model, hidden), num_layers=layers)
            need = spec.total_params() * elem * 4 / 2**30  # weights, grads, exp_avg, exp_avg_sq
            if need > 0.6 * memory_gib(dev):
                notes.append(f"adam at h={hidden} layers={layers}: {need:.0f} GiB of states, skipped")
                continue
            net = build_model(spec, dev, dtype, flash=True)
            params = [p for p in net.parameters()]
            for p in params:
                p.grad = torch.randn_like(p)
            opt = make_optimizer(params, dev)
            timing = time_op(opt.step, dev, sweep.warmup, max(3, sweep.repeats // 2), sweep.min_sample_s,
                             clock=sweep.clock, cold=dev.type == "cpu")
            n = sum(p.numel() for p in params)
            rows.append({"op": ADAM, "variant": "", "dtype": dtype_name, "device": dev.type,
                         **_shape(spec, None, layers), "m": 0, "n": 0, "k": 0, "batch": 0, "flops": 0.0,
                         "bytes": 0.0, "params": n, "samples": timing.samples, "median_s": timing.median_s,
                         "p10_s": timing.p10_s, "p90_s": timing.p90_s, "host_s": timing.host_s})
            log(f"  adam h={hidden} layers={layers}: {n:,} params, {timing.median_s * 1e3:.2f} ms")
            del net, params, opt
            _free(dev)
    return rows, notes


def host_time_per_kernel(rows: Sequence[Dict[str, Any]], kernels: Dict[str, int]) -> float:
    """GPU profiles: median host issue time per kernel over the timed ops (for host_time_s)."""
    per = [r["host_s"] / max(1, kernels.get(r["op"], 1)) for r in rows if r["op"] != ADAM and r["host_s"] > 0]
    return float(median(per)) if per else 0.0


def op_kernels(model: ModelSpec, plan: ParallelPlan) -> Dict[str, int]:
    graph = build_model_graph(model, plan, plan_tp_comms(model, plan))
    out: Dict[str, int] = {}
    for comp in (graph.embedding, graph.layer, graph.head):
        for ops in (comp.forward, comp.backward):
            for op in ops.ops:
                out[op.name] = op.kernels
    return out


def eprint(msg: str) -> None:
    print(msg, file=sys.stderr)
