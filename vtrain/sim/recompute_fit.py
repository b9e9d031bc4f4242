"""The least recompute that fits a plan in memory: Megatron-Core's recompute settings from none to full, lightest
first, as a tuned recipe recomputes no more than it must. ``task=validate`` runs it for a row silent on its mode
(:func:`vtrain.validation.run.simulate_row`), ``task=simulate`` names it for a plan that does not fit
(:func:`vtrain.api.least_recompute_that_fits`).

The steps (:func:`recompute_steps`): no recompute; selective (the attention core); selective with the wider
``--recompute-modules``: the norms and an MoE model's expert activation (memory-bound kernels), then also MLA's
up-projections (GEMMs); block recompute of the first k layers of each model chunk (``--recompute-method block
--recompute-num-layers k``), k = 1 .. layers per chunk - 1; full recompute of every layer. Memory falls along
them, so the block steps are searched by bisection, and when full recompute does not fit nothing else is tried
(:func:`first_fitting`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from vtrain.report import Report
from vtrain.workload.enums import Recompute
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

MODES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)  # Megatron-Core's granularities, lightest first
# torchtitan's activation checkpointing modes (its "selective" is per-op SAC; no block recompute by layer count)
PER_OP_MODES = (Recompute.NONE, Recompute.SELECTIVE_OP, Recompute.FULL)
T = TypeVar("T")


@dataclass(frozen=True)
class BlockRun:
    """Block recompute of the first k = ``lo`` .. ``hi`` layers of each chunk: one step per k, searched by
    bisection (a chunk may hold millions of layers in a fuzzed config; the steps are never listed)."""

    lo: int
    hi: int

    def at(self, k: int) -> Dict[str, Any]:
        return {"recompute": Recompute.FULL, "recompute_num_layers": k}


Step = Union[Dict[str, Any], BlockRun]


def recompute_steps(modes: Sequence[Recompute], model: ModelSpec, plan: ParallelPlan,
                    block: bool = True) -> List[Step]:
    """The recompute settings (plan fields) of ``modes`` with Megatron-Core's finer steps between them, lightest
    first: after ``selective`` its wider module sets, before ``full`` (with ``block``) block recompute of k layers
    per chunk (a :class:`BlockRun`)."""
    out: List[Step] = []
    for mode in modes:
        if mode == Recompute.FULL and block:
            chunk = -(-model.num_layers // (plan.pp * max(1, plan.virtual_stages)))
            if chunk > 1:
                out.append(BlockRun(1, chunk - 1))
        out.append({"recompute": mode})
        if mode == Recompute.SELECTIVE:  # the memory-bound modules first, then MLA's up-projection GEMMs
            wider = ["core_attn", "layernorm"] + (["moe_act"] if model.is_moe else [])
            out.append({"recompute": mode, "recompute_modules": ",".join(wider)})
            if model.q_lora_rank or model.kv_lora_rank:
                out.append({"recompute": mode, "recompute_modules": ",".join([*wider, "mla_up_proj"])})
    return out


def first_fitting(steps: Sequence[Step],
                  attempt: Callable[[Mapping[str, Any]], Optional[Tuple[T, Report]]]) -> Optional[Tuple[T, Report]]:
    """The first of ``steps`` whose attempt fits, else the last attempt that ran (None: none ran). ``attempt``
    returns None for a step the plan rules out. A :class:`BlockRun` is bisected for the fewest layers that fit
    (memory falls as layers are recomputed). When the heaviest step, the last, does not fit, no other is tried."""
    if not steps:
        return None
    last_step = steps[-1]
    heaviest = attempt(last_step.at(last_step.hi) if isinstance(last_step, BlockRun) else last_step)
    if heaviest is not None and not heaviest[1].fits:
        return heaviest
    last = heaviest
    for step in steps:
        if isinstance(step, BlockRun):
            lo, hi = step.lo, step.hi
            while lo < hi:
                mid = (lo + hi) // 2
                probe = attempt(step.at(mid))
                lo, hi = (lo, mid) if probe is not None and probe[1].fits else (mid + 1, hi)
            got = attempt(step.at(lo))
        else:
            got = heaviest if step is last_step else attempt(step)
        if got is not None:
            if got[1].fits:
                return got
            last = got if heaviest is None else heaviest
    return last


def recompute_label(plan: ParallelPlan) -> str:
    """The recompute settings as a label: the mode, with Megatron-Core's modules when they are not the default
    attention core, or the layers per chunk of a block recompute."""
    if plan.recompute == Recompute.SELECTIVE and plan.recompute_modules != "core_attn":
        return f"selective ({plan.recompute_modules})"
    if plan.recompute == Recompute.FULL and plan.recompute_num_layers:
        return f"full ({plan.recompute_num_layers} layers per chunk)"
    return str(plan.recompute.value)


def recompute_overrides(plan: ParallelPlan) -> str:
    """The command-line overrides that set ``plan``'s recompute settings."""
    out = f"parallelism.recompute={plan.recompute.value}"
    if plan.recompute == Recompute.SELECTIVE and plan.recompute_modules != "core_attn":
        out += f" parallelism.recompute_modules={plan.recompute_modules}"
    if plan.recompute == Recompute.FULL and plan.recompute_num_layers:
        out += f" parallelism.recompute_num_layers={plan.recompute_num_layers}"
    return out
