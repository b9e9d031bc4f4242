"""Simulate every measured row and collect predicted vs measured times."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from vtrain.cost.analytical import AnalyticalCostModel
from vtrain.errors import ConfigError
from vtrain.report import Report
from vtrain.sim.memory_margin import usable_bytes
from vtrain.sim.recompute_fit import first_fitting, recompute_label, recompute_steps
from vtrain.sim.simulator import host_fraction, leaf_regime, simulate_workload
from vtrain.validation.csv_io import MEASURED, MeasuredRow
from vtrain.validation.metrics import ErrorSummary, summarise_ape
from vtrain.validation.published import pasted_row
from vtrain.validation.ranking import ranking_group, ranking_plan
from vtrain.validation.recipes import PRESET_MICRO_BATCH
from vtrain.validation.rows import RowDefaults, cell_number, defaults_of, row_workload, states_recompute
from vtrain.workload.enums import Recompute
from vtrain.workload.workload import Workload


@dataclass(frozen=True)
class RowResult:
    """One row: measured and predicted iteration time (ms; from the measured tokens/s per GPU when that is
    what the row gives), the error in the measured quantity, and the predicted memory."""

    row: MeasuredRow
    measured_ms: float
    predicted_ms: Optional[float]
    skipped_reason: Optional[str] = None
    quantity: str = "iteration_time_ms"  # what was measured: iteration_time_ms | a rate (RATES)
    fits: Optional[bool] = None
    peak_memory_gib: Optional[float] = None
    measured_peak_memory_gib: Optional[float] = None
    # intervals: the Report's 80% interval of the predicted time, its class, and the row's leaf class
    predicted_lo_ms: Optional[float] = None
    predicted_hi_ms: Optional[float] = None
    interval_regime: str = ""
    leaf_regime: str = ""
    stack: str = ""  # the software stack and recompute mode simulated (what the row said or its defaults)
    recompute: str = ""
    plan_shape: str = ""  # the simulated (tp,pp,dp): what the row's cells resolved to (an absent pp is 1, dp derived)
    micro_batch: str = ""  # the simulated micro-batch (a row silent on it: the fastest that fits, simulate_row)
    # the row's recompute mode's predicted peak (GiB) when it was ruled out (RULED_OUT_MEMORY_FACTOR)
    ruled_out_recompute_peak_gib: Optional[float] = None
    notes: str = ""  # what was read or ignored of the row's pasted cells (validation.published.pasted_row)
    # what runs it is ranked against (model, GPU type and count, sequence, global batch: validation.ranking)
    group: str = ""
    usable_memory_gib: Optional[float] = None  # its cluster's memory margin (cluster.usable_hbm_fraction)
    plan_key: str = ""  # what a planner chooses of the run (validation.ranking.ranking_plan): one plan ranks once

    @property
    def covered(self) -> Optional[bool]:
        """Whether the measured time lies inside the 80% interval (None: not simulated)."""
        if self.predicted_lo_ms is None or self.predicted_hi_ms is None:
            return None
        return self.predicted_lo_ms <= self.measured_ms <= self.predicted_hi_ms

    @property
    def ape_pct(self) -> Optional[float]:
        """Absolute percentage error of the measured quantity (throughput is the inverse of time)."""
        if self.predicted_ms is None:
            return None
        if self.quantity in RATES:
            return abs(self.measured_ms / self.predicted_ms - 1.0) * 100.0
        return abs(self.predicted_ms - self.measured_ms) / self.measured_ms * 100.0

    @property
    def memory_ape_pct(self) -> Optional[float]:
        if self.peak_memory_gib is None or not self.measured_peak_memory_gib:
            return None
        return abs(self.peak_memory_gib - self.measured_peak_memory_gib) / self.measured_peak_memory_gib * 100.0


# a measurement this many times the prediction or less than its inverse is a unit or transcription error
# (ms given as s, a job's rate as a GPU's), not a model error: vtrain's worst validated rows are 2.3x off
IMPLAUSIBLE_RATIO = 20.0


def _positive(row: MeasuredRow, column: str) -> Optional[float]:
    """A measured value: a finite number > 0 (as tables write it: :func:`vtrain.validation.rows.cell_number`),
    or None when the column is empty; else a one-line error."""
    raw = row.get(column)
    if raw is None:
        return None
    try:
        value = cell_number(column, raw)
    except ValueError:
        raise ConfigError(f"row {row.index}: {column}={raw} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"row {row.index}: {column}={raw} must be a finite number > 0")
    return value


RATES = ("tokens_per_s_per_gpu", "samples_per_s", "model_tflops_per_gpu", "mfu")  # measured as the inverse of time


def measured_ms(row: MeasuredRow, w: Workload) -> Tuple[float, str]:
    """(measured iteration ms, quantity) of a row: the first of its time columns (ms, then seconds), else its
    throughput (tokens per GPU, of the job, sequences of the job), else its model TFLOP/s per GPU, else its MFU
    (of the GPU's dense bf16 peak), each converted with the FLOP count of the stack that reported it
    (:func:`reported_flops`); the error is reported in that quantity."""
    tokens_per_iteration = w.plan.global_batch_size * w.plan.seq_len
    gpus = w.plan.num_gpus
    ms = _positive(row, "iteration_time_ms")
    if ms is not None:
        return ms, "iteration_time_ms"
    for column in ("iteration_time_s", "step_time_s"):
        s = _positive(row, column)
        if s is not None:
            return s * 1e3, "iteration_time_ms"
    tps = _positive(row, "tokens_per_s_per_gpu")
    if tps is None:
        total = _positive(row, "tokens_per_s")
        if total is not None:
            tps = total / gpus
    if tps is not None:
        return tokens_per_iteration / (tps * gpus) * 1e3, "tokens_per_s_per_gpu"
    samples = _positive(row, "samples_per_s")
    if samples is not None:
        return w.plan.global_batch_size / samples * 1e3, "samples_per_s"
    tflops = _positive(row, "model_tflops_per_gpu")
    if tflops is not None:
        return reported_flops(w) / (tflops * 1e12 * gpus) * 1e3, "model_tflops_per_gpu"
    mfu = _mfu(row)
    if mfu is not None:  # of the peak a report's MFU takes (bf16 also for low precisions: the simulator's own)
        peak_flops = w.cluster.gpu.peak_flops_per_s(w.plan.precision.activation.value)
        return reported_flops(w, "mfu") / (mfu * peak_flops * gpus) * 1e3, "mfu"
    raise ConfigError(f"row {row.index}: {', '.join(MEASURED)} are all empty")


# the stacks whose runs report TFLOP/s by Narayanan et al.'s Eq. 3 with the recompute pass counted (SC'21's own
# tables; Megatron-DeepSpeed's throughput_calculator: 24 x (4 with activation checkpointing, else 3) x B s l h^2
# x (1 + s/6h + V/16lh)), before Megatron-Core's num_floating_point_operations (2023) counted model FLOPs only
EQ3_STACKS = ("megatron_lm_2021", "megatron_deepspeed_2022")


def reported_flops(w: Workload, quantity: str = "model_tflops_per_gpu") -> float:
    """The FLOPs of one iteration as the row's stack counts them for ``quantity``: torchtitan's
    ``get_nparams_and_flops`` (6 x the active parameters without the input embedding + 12 x layers x heads x
    head dim x sequence per token: attention counted in full, "not accounting for sparsity in causal
    attention"); a 2021-2022 Megatron stack's (:data:`EQ3_STACKS`) TFLOP/s by Eq. 3, with the recompute pass
    when the plan recomputes in full, and its MFU by the same without it (MFU counts model FLOPs only); else
    Megatron-Core's (:func:`vtrain.validation.megatron_flops.megatron_flops_per_iteration`)."""
    from vtrain.validation.megatron_flops import megatron_flops_per_iteration
    from vtrain.workload.model import megatron_flops_per_iteration as eq3_flops

    m, p = w.model, w.plan
    if w.stack.name.startswith("torchtitan"):
        per_token = 6.0 * m.active_params(embedding=False) + 12.0 * m.num_layers * m.num_heads * m.head_dim * p.seq_len
        return per_token * p.global_batch_size * p.seq_len
    if w.stack.name.startswith(EQ3_STACKS):
        recomputed = quantity != "mfu" and p.recompute == Recompute.FULL
        return eq3_flops(p.global_batch_size, p.seq_len, m.num_layers, m.hidden_size, m.vocab_shard(p.tp) * p.tp,
                         recomputed)
    return megatron_flops_per_iteration(m, p.global_batch_size, p.seq_len, p.tp)


def _mfu(row: MeasuredRow) -> Optional[float]:
    """A row's model FLOPs utilisation as a fraction: "45.2%", "45.2" (a number above 2 is a percentage) or
    "0.452"; None when empty, else a one-line error (an MFU above 100% of the bf16 peak is an FP8 run's at most
    twice that)."""
    raw = row.get("mfu")
    if raw is None:
        return None
    percent = raw.strip().endswith("%")
    value = _positive(MeasuredRow(row.index, {"mfu": raw.strip().rstrip("%").strip()}), "mfu")
    if value is None:  # "%" alone
        raise ConfigError(f"row {row.index}: mfu={raw} is not a number")
    fraction = value / 100.0 if percent or value > 2.0 else value
    if fraction > 2.0:
        raise ConfigError(f"row {row.index}: mfu={raw} is above 200% of the bf16 peak")
    return fraction


def check_measured_ms(row: MeasuredRow, measured: float) -> float:
    """``measured`` (ms) when it can be an iteration time (1 ns .. 30,000 years), else a one-line error."""
    if not math.isfinite(measured) or not 1e-6 < measured < 1e15:
        raise ConfigError(f"row {row.index}: the measurement gives an iteration of {measured:g} ms "
                          "(outside 1e-6 .. 1e15 ms: check its value and unit)")
    return measured


def check_plausible(row: MeasuredRow, measured_ms: float, predicted_ms: float) -> None:
    """A one-line error when the measurement is more than IMPLAUSIBLE_RATIO from the prediction (a unit or
    transcription error, not a model error)."""
    ratio = measured_ms / predicted_ms if predicted_ms > 0 else math.inf
    if not 1 / IMPLAUSIBLE_RATIO < ratio < IMPLAUSIBLE_RATIO:
        raise ConfigError(f"row {row.index}: the measurement gives an iteration of {measured_ms:g} ms, "
                          f"{ratio:.3g}x the predicted {predicted_ms:.4g} ms (more than "
                          f"{IMPLAUSIBLE_RATIO:g}x apart: check its value and unit)")


def _measured_memory_gib(row: MeasuredRow) -> Optional[float]:
    """The row's measured peak memory per GPU in GiB: ``peak_memory_gib``, else ``peak_memory_gb`` (a header's
    "GB": 1e9 bytes, converted), else None."""
    column = "peak_memory_gib" if row.get("peak_memory_gib") is not None else "peak_memory_gb"
    mem = _positive(row, column)
    if mem is None:
        return None
    gib = mem if column == "peak_memory_gib" else mem * 1e9 / 2**30
    if not 1e-6 < gib < 1e6:  # 1 KiB .. 1 PiB per GPU
        raise ConfigError(f"row {row.index}: {column}={row.get(column)} is outside 1e-6 .. 1e6 GiB "
                          "(check its value and unit)")
    return gib


# the micro-batches a row silent on its micro-batch may have run (Megatron's published recipes and the SC'21
# scripts use 1-16): :func:`_micro_batch_choices`
UNSTATED_MICRO_BATCHES = (1, 2, 4, 8, 16)


def _with_micro_batch(row: MeasuredRow, micro_batch: int) -> MeasuredRow:
    return MeasuredRow(row.index, {**row.values, "micro_batch": str(micro_batch)})


def _micro_batch_choices(row: MeasuredRow, cfg: Any, load_gpu: Any, load_stack: Any,
                         defaults: Optional[RowDefaults], stack: Optional[str]) -> Sequence[Optional[int]]:
    """(None,) for a row that states its micro-batch (or torchtitan's per-rank batch); else, where it states
    its global batch, the micro-batches of :data:`UNSTATED_MICRO_BATCHES` that divide its per-replica batch:
    the validator runs the fastest that fits, as a tuned run would have."""
    if row.get("micro_batch") is not None or row.get("local_batch") is not None:
        return (None,)
    if row.get("global_batch") is None and row.get("global_batch_tokens") is None:
        return (None,)  # nothing to split: row_workload names what is missing
    w = row_workload(_with_micro_batch(row, 1), cfg.cluster, load_gpu, load_stack, defaults, stack)
    per_replica = w.plan.global_batch_size // w.plan.dp
    return tuple(b for b in UNSTATED_MICRO_BATCHES if per_replica % b == 0) or (1,)


def _rank(report: Report) -> Tuple[bool, float]:
    """Fitting plans first, then the faster."""
    return (not report.fits, report.iteration_time_s)


# A row whose recompute mode (stated, or its defaults') is predicted to need more than this many times its GPU's
# memory cannot have run so (it ran, so it fitted): far outside the memory model's measured error (torchtitan
# peak memory: MAPE 10.3%, largest 18.5%, README "Accuracy"), so the mode, not the model, is taken to be wrong
# and the row runs the lightest heavier mode that fits; validation.csv keeps the row's ``recompute`` beside
# ``simulated_recompute``, and ``ruled_out_recompute_peak_gib`` says why.
RULED_OUT_MEMORY_FACTOR = 2.0
# the modes tried for such a row when its defaults name none (RowDefaults.recompute_to_fit), lightest first
RECOMPUTE_LADDER = (Recompute.SELECTIVE, Recompute.FULL)


def _with_recompute(row: MeasuredRow, mode: Recompute) -> MeasuredRow:
    return MeasuredRow(row.index, {**row.values, "recompute": mode.value})


def _at_preset_micro_batch(row: MeasuredRow) -> Optional[MeasuredRow]:
    """The row at its framework preset's micro-batch (:data:`vtrain.validation.recipes.PRESET_MICRO_BATCH`, from
    the recipe of its framework, model, GPU, precision and layout) where it states another one; else None."""
    preset, stated = row.get(PRESET_MICRO_BATCH), row.get("micro_batch")
    if preset is None or stated is None or cell_number("micro_batch", stated) == cell_number("micro_batch", preset):
        return None
    return _with_micro_batch(row, int(cell_number("micro_batch", preset)))


def simulate_row(row: MeasuredRow, cfg: Any, load_gpu: Any, load_stack: Any, defaults: Optional[RowDefaults],
                 stack: Optional[str]) -> Tuple[Workload, Report, Optional[float]]:
    """The row's workload and report, and its recompute mode's predicted peak (bytes) when that mode was ruled
    out (else None). A row silent on recompute whose defaults say so (``RowDefaults.recompute_to_fit``) takes
    the first of :func:`vtrain.sim.recompute_fit.recompute_steps` that fits, unless the preset of its framework
    runs another micro-batch that fits without (:func:`_at_preset_micro_batch`: a stated micro-batch that fits
    only by a recompute the preset does not run is not what ran); a row whose mode needs more than
    :data:`RULED_OUT_MEMORY_FACTOR` x its GPU's memory the first mode of that ladder (or
    :data:`RECOMPUTE_LADDER`) that fits at a lower peak; a row silent on its micro-batch the fastest of
    :func:`_micro_batch_choices` that fits (else the fastest)."""
    modes = defaults_of(row, cfg.cluster, load_gpu, defaults, stack).recompute_to_fit
    choices = _micro_batch_choices(row, cfg, load_gpu, load_stack, defaults, stack)

    def fastest(r0: MeasuredRow, settings: Optional[Mapping[str, Any]]) -> Tuple[Workload, Report]:
        best: Optional[Tuple[Workload, Report]] = None
        refused: Optional[ConfigError] = None
        for mb in choices:
            r = r0 if mb is None else _with_micro_batch(r0, mb)
            try:  # an unstated micro-batch the schedule cannot run (its count of micro-batches) is passed over
                w = row_workload(r, cfg.cluster, load_gpu, load_stack, defaults, stack, recompute=settings)
            except ConfigError as err:
                if mb is None:
                    raise
                refused = refused or err
                continue
            report, _ = simulate_workload(w, AnalyticalCostModel(w))
            if best is None or _rank(report) < _rank(best[1]):
                best = (w, report)
        if best is None:  # no micro-batch of the choices schedules: the first one's reason
            assert refused is not None
            raise refused
        return best

    def tried(r0: MeasuredRow, settings: Optional[Mapping[str, Any]]) -> Optional[Tuple[Workload, Report]]:
        try:
            return fastest(r0, settings)
        except ConfigError:  # a step the row's own cells rule out (e.g. a layer count needs full recompute)
            return None

    silent = modes and not states_recompute(row)
    w, report = fastest(row, {"recompute": modes[0]} if silent else None)
    preset = _at_preset_micro_batch(row) if silent and not report.fits else None
    at_preset = tried(preset, {"recompute": modes[0]}) if preset is not None else None
    if at_preset is not None and at_preset[1].fits:  # the preset's micro-batch, as its recompute runs it
        w, report = at_preset
    elif silent and not report.fits:
        got = first_fitting(recompute_steps(modes, w.model, w.plan)[1:], lambda s: tried(row, s))
        if got is not None:
            w, report = got
    if report.peak_memory_bytes > RULED_OUT_MEMORY_FACTOR * report.memory_capacity_bytes:
        for mode in modes or RECOMPUTE_LADDER:
            heavier = tried(_with_recompute(row, mode), None)
            if heavier is not None and heavier[1].fits and heavier[1].peak_memory_bytes < report.peak_memory_bytes:
                return heavier[0], heavier[1], report.peak_memory_bytes
    return w, report, None


def validate_rows(rows: Sequence[MeasuredRow], cfg: Any, defaults: Optional[RowDefaults] = RowDefaults(),
                  stack: Optional[str] = None) -> List[RowResult]:
    """Simulate each row on ``cfg.cluster`` (``stack``: validate.stack, for rows without a stack column;
    ``defaults`` None: by the stack each row names, else its GPU, :func:`vtrain.validation.rows.defaults_of`)."""
    from vtrain.config.compose import load_gpu_config, load_stack_config

    load_gpu = functools.lru_cache(maxsize=None)(load_gpu_config)
    load_stack = functools.lru_cache(maxsize=None)(load_stack_config)
    out: List[RowResult] = []
    for pasted in rows:
        row = pasted
        notes: List[str] = []
        try:
            row, notes = pasted_row(pasted)  # the cells as a table writes them, in the row builder's spellings
            w, report, ruled_out = simulate_row(row, cfg, load_gpu, load_stack, defaults, stack)
            if not math.isfinite(report.iteration_time_s) or report.iteration_time_s <= 0:
                raise ConfigError(f"row {row.index}: the predicted iteration time is {report.iteration_time_s} "
                                  "(a shape no run has: check its sizes)")
            measured, quantity = measured_ms(row, w)
            check_measured_ms(row, measured)
            check_plausible(row, measured, report.iteration_time_s * 1e3)
            mem = _measured_memory_gib(row)
        except ConfigError as err:
            reason = " ".join(str(err).split())  # one line, whatever the cells held, naming its row
            prefix = f"row {row.index}:"
            out.append(RowResult(pasted, float("nan"), None,
                                 reason if reason.startswith(prefix) else f"{prefix} {reason}", notes="; ".join(notes)))
            continue
        out.append(RowResult(pasted, measured, report.iteration_time_s * 1e3, None, quantity, report.fits,
                             report.peak_memory_bytes / 2**30, mem, report.iteration_time_lo_s * 1e3,
                             report.iteration_time_hi_s * 1e3, report.interval_regime,
                             leaf_regime(w, report.provenance, host_fraction(report)), w.stack.name,
                             recompute_label(w.plan), f"({w.plan.tp},{w.plan.pp},{w.plan.dp})",
                             str(w.plan.micro_batch_size), None if ruled_out is None else ruled_out / 2**30,
                             "; ".join(notes), ranking_group(w), usable_bytes(w.cluster) / 2**30,
                             ranking_plan(w)))
    return out


def summary_of(results: Sequence[RowResult]) -> ErrorSummary:
    """MAPE etc. of the measured quantity over the simulated rows."""
    ok = [r for r in results if r.predicted_ms is not None]
    ape = [r.ape_pct for r in ok]
    return summarise_ape([a for a in ape if a is not None], skipped=len(results) - len(ok))


def coverage_pct(results: Sequence[RowResult]) -> Optional[float]:
    """Share of the simulated rows whose measured time lies inside its 80% interval (None: no rows)."""
    cov = [r.covered for r in results if r.covered is not None]
    return 100.0 * sum(cov) / len(cov) if cov else None


def memory_summary_of(results: Sequence[RowResult]) -> Optional[ErrorSummary]:
    """The same figures for the predicted peak memory, over rows that state it (None: none does)."""
    ape = [a for a in (r.memory_ape_pct for r in results) if a is not None]
    return summarise_ape(ape) if ape else None
