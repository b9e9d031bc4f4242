"""vtrain's one plan notation, for everything it prints or writes: ``(tp, pp, dp)`` first, then the rest
(:func:`plan_parts`). Under a header (:func:`plan_label`), standing alone (:func:`plan_named`), in a sentence
(:func:`plan_sentence`); durations, days and dollars as the outputs print them.

    (4, 8, 32) mb=1 interleaved x4 rc=selective sp dist-opt      # under the header "(tp, pp, dp) ..."
    (1, 16, 128) mb=1 dualpipe rc=full dist-opt ep=64 deepep fp8_blockwise   # cp, ep, etp, ZeRO-2/3, precision
                                                                             # appear when they are set
    (8, 8, 4) mb=1 1f1b rc=full(2) sp dist-opt cp=2 (allgather)    # block recompute of 2 layers per chunk
    (1, 1, 64) mb=2 1f1b rc=selective zero-3 shard=8 no-reshard    # hybrid sharding, params kept gathered
    (tp, pp, dp) = (4, 8, 32), mb=1, interleaved x4, rc=selective, sp, dist-opt      # in a sentence
    (tp,pp,dp)=(4,8,32) mb=1 interleaved x4 rc=selective sp dist-opt                # standing alone
"""
from __future__ import annotations

from typing import Any, List, Mapping

DAY_S = 86400.0
HEADER = "(tp, pp, dp) mb schedule recompute"


def _raw(v: Any) -> Any:
    return v.value if hasattr(v, "value") else v


def plan_parts(plan: Mapping[str, Any]) -> List[str]:
    """Everything after ``(tp, pp, dp)``: micro-batch, schedule, recompute, then what is set."""
    sched = str(_raw(plan["schedule"]))
    if int(plan.get("virtual_stages", 1)) > 1:
        sched += f" x{plan['virtual_stages']}"
    rc = f"rc={_raw(plan['recompute'])}"
    if int(plan.get("recompute_num_layers", 0) or 0):  # block recompute: the first N layers of each chunk
        rc += f"({plan['recompute_num_layers']})"
    parts = [f"mb={plan['micro_batch_size']}", sched, rc]
    if plan.get("sequence_parallel"):
        parts.append("sp")
    stage = int(plan.get("zero_stage", 0) or 0)
    if stage >= 2:
        parts.append(f"zero-{stage}")
    elif plan.get("distributed_optimizer") or stage == 1:
        parts.append("dist-opt")
    if int(plan.get("fsdp_shard_size", 0) or 0):  # hybrid sharding: states sharded within groups of N ranks
        parts.append(f"shard={plan['fsdp_shard_size']}")
    if stage == 3 and plan.get("reshard_after_forward") is False:
        parts.append("no-reshard")
    if int(plan.get("cp", 1) or 1) > 1:
        comm = str(_raw(plan.get("cp_comm", "p2p")))
        parts.append(f"cp={plan['cp']}" + ("" if comm == "p2p" else f" ({comm})"))
    if int(plan.get("ep", 1) or 1) > 1:  # MoE: expert parallelism and its dispatcher
        parts.append(f"ep={plan['ep']}")
        if plan.get("moe_dispatcher"):
            parts.append(str(_raw(plan["moe_dispatcher"])))
    if int(plan.get("etp", 0) or 0) and int(plan["etp"]) != int(plan["tp"]):
        parts.append(f"etp={plan['etp']}")
    precision = str(_raw(plan.get("precision", "bf16")))
    if precision != "bf16":  # the default training precision is not repeated on every line
        parts.append(precision)
    return parts


def degrees(plan: Mapping[str, Any]) -> str:
    return f"({plan['tp']}, {plan['pp']}, {plan['dp']})"


def plan_label(plan: Any) -> str:
    """Compact: ``(4, 8, 32) mb=1 interleaved x4 rc=selective sp dist-opt``."""
    p = plan.as_dict() if hasattr(plan, "as_dict") else plan
    return " ".join([degrees(p), *plan_parts(p)])


def plan_sentence(plan: Any) -> str:
    """``(tp, pp, dp) = (4, 8, 32), mb=1, ...``."""
    p = plan.as_dict() if hasattr(plan, "as_dict") else plan
    return ", ".join([f"(tp, pp, dp) = {degrees(p)}", *plan_parts(p)])


def plan_shape(plan: Any) -> str:
    """The degrees standing alone: ``(tp,pp,dp)=(8,16,8)``."""
    p = plan.as_dict() if hasattr(plan, "as_dict") else plan
    return f"(tp,pp,dp)=({p['tp']},{p['pp']},{p['dp']})"


def plan_named(plan: Any) -> str:
    """Standing alone (a report, a sweep row): ``(tp,pp,dp)=(8,16,8) mb=1 1f1b rc=full sp dist-opt``."""
    p = plan.as_dict() if hasattr(plan, "as_dict") else plan
    return " ".join([plan_shape(p), *plan_parts(p)])


def fmt_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 3600:
        return f"{seconds:.2f} s"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def fmt_days(seconds: float) -> str:
    return f"{seconds / DAY_S:,.1f} days"


def fmt_usd(usd: float) -> str:
    return f"${usd / 1e6:,.3f}M" if usd >= 1e6 else f"${usd:,.0f}"
