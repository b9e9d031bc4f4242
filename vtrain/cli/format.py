"""Human-readable rendering of a Report."""
from __future__ import annotations

from typing import Any, Dict, List

from vtrain.io.labels import fmt_duration, plan_named
from vtrain.report import Report, StageBreakdown

GIB = 2**30


def fmt_energy(kwh: float) -> str:
    """kWh with an SI prefix: 950 kWh, 1.2 MWh, 3.4 GWh."""
    for scale, unit in ((1e6, "GWh"), (1e3, "MWh")):
        if abs(kwh) >= scale:
            return f"{kwh / scale:,.1f} {unit}"
    return f"{kwh:,.2f} kWh" if abs(kwh) < 10 else f"{kwh:,.1f} kWh"


def fmt_mass_kg(kg: float) -> str:
    return f"{kg / 1e3:,.1f} t" if abs(kg) >= 1e3 else f"{kg:,.1f} kg"


def headline(r: Report) -> Dict[str, Any]:
    """A report's key figures for a sweep summary row (``best``: one line)."""
    days = r.time_to_train_s / 86400
    return {"best": f"{plan_named(r.plan)} on {r.gpus_used} GPUs: {fmt_duration(r.iteration_time_s)} per iteration, "
                    f"{days:,.1f} days, ${r.cost_usd:,.0f}, MFU {r.mfu * 100:.1f}%"
                    + ("" if r.fits else ", DOES NOT FIT"),
            "plan": plan_named(r.plan), "gpus": r.gpus_used, "iteration_time_s": r.iteration_time_s,
            "days_to_train": days, "cost_usd": r.cost_usd, "mfu_pct": r.mfu * 100,
            "peak_memory_gib": r.peak_memory_bytes / GIB, "fits": r.fits, "energy_kwh": r.energy_kwh,
            "co2_kg": r.co2_kg}


# the names of the communication groups in StageBreakdown.exposed_comm_by_group, for the report
GROUP_LABELS = {"tp": "TP", "cp": "CP", "fsdp": "ZeRO-3/FSDP", "ep": "EP all-to-all", "pp": "PP p2p",
                "dp": "DP", "embedding": "embedding sync"}


def _count(x: float) -> str:
    """A count or rate with thousands separators; below 10, three significant digits (not a rounded 0)."""
    return f"{x:,.0f}" if x >= 10 else f"{x:.3g}"


def _exposed_by_group(b: StageBreakdown) -> List[str]:
    """One line splitting the critical stage's exposed communication by group, largest first (none when
    nothing is exposed)."""
    parts = sorted(((v, k) for k, v in b.exposed_comm_by_group.items() if v > 0), reverse=True)
    if not parts:
        return []
    return ["  exposed comm by group: " + ", ".join(f"{GROUP_LABELS.get(k, k)} {fmt_duration(v)}" for v, k in parts)]


def _of_which_peak(r: Report) -> str:
    """MFU's denominator where a low-precision plan makes it ambiguous: the bf16 peak, as torchtitan and Megatron
    report it, so FP8 and FP4 plans can pass 100%."""
    return f"  (MFU/HFU of the {r.plan.precision.activation.value} peak)" if r.plan.precision.low else ""


def _energy_in_cost(r: Report) -> str:
    """Whether the cost above holds the energy (pricing.include_energy): it does when it exceeds the GPU-hours."""
    included = r.energy_cost_usd > 0 and r.cost_usd > r.gpu_hours * r.usd_per_gpu_hour * (1 + 1e-9)
    return "included in the cost above: pricing.include_energy" if included else "on-premises; not in the cost above"


def render_report(r: Report) -> str:
    b = r.breakdown
    lines = [
        f"vtrain: {r.model} on {r.cluster} ({r.gpus_used} x {r.gpu}), cost model: {r.cost_model}",
        f"plan: {plan_named(r.plan)}, {r.plan.num_microbatches} micro-batches per replica",
        f"iteration time: {fmt_duration(r.iteration_time_s)}   MFU {r.mfu * 100:.1f}%   HFU {r.hfu * 100:.1f}%   "
        f"{_count(r.tokens_per_s)} tokens/s{_of_which_peak(r)}",
        f"breakdown (critical stage {b.stage}): compute {fmt_duration(b.compute_s)}, host overhead "
        f"{fmt_duration(b.host_overhead_s)}, exposed comm {fmt_duration(b.exposed_comm_s)}, bubble "
        f"{fmt_duration(b.bubble_s)}, optimizer {fmt_duration(b.optimizer_s)}",
        *_exposed_by_group(b),
        f"memory per GPU (peak stage): {r.peak_memory_bytes / GIB:.1f} GiB of {r.memory_capacity_bytes / GIB:.0f} GiB"
        f" -> {'fits' if r.fits else 'DOES NOT FIT'}  (weights {r.memory.weights_bytes / GIB:.1f}, grads "
        f"{r.memory.gradients_bytes / GIB:.1f}, optimizer {r.memory.optimizer_bytes / GIB:.1f}, activations "
        f"{r.memory.activations_bytes / GIB:.1f}, other {r.memory.other_bytes / GIB:.1f} GiB)",
        f"time to train: {fmt_duration(r.time_to_train_s)} ({_count(r.iterations)} iterations), "
        f"{r.gpu_hours:,.0f} GPU-hours, ${r.cost_usd:,.0f} at ${r.usd_per_gpu_hour:.2f}/GPU-hour",
        f"energy: {fmt_energy(r.energy_kwh)} to train ({fmt_energy(r.energy_kwh_per_iteration)} per iteration, "
        f"site PUE included; {r.avg_power_w_per_gpu:,.0f} W per GPU with its node share), "
        f"{fmt_mass_kg(r.co2_kg)} CO2, ${r.energy_cost_usd:,.0f} of electricity ({_energy_in_cost(r)})",
        f"80% interval: iteration {fmt_duration(r.iteration_time_lo_s)} to {fmt_duration(r.iteration_time_hi_s)}, "
        f"time to train {fmt_duration(r.time_to_train_lo_s)} to {fmt_duration(r.time_to_train_hi_s)}, "
        f"${r.cost_lo_usd:,.0f} to ${r.cost_hi_usd:,.0f} (residuals of class {r.interval_regime})",
    ]
    fitted = sorted(k.split(".", 1)[-1] for k, v in r.provenance.items() if v.startswith("fitted"))
    transferred = sum(v.startswith("transferred") for v in r.provenance.values())
    lines.append(f"stack: {r.stack}; constants fitted to measurements: " + (", ".join(fitted) if fitted else "none")
                 + f"; {transferred} transferred (report.json gives each one's source)")
    lines.extend(r.notes)
    if r.extrapolated_ops:
        lines.append(f"extrapolated outside the profile: {', '.join(r.extrapolated_ops)}")
    return "\n".join(lines)
