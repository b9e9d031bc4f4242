"""Published runs as pasted: the cells of compiled tables read as the row builder's columns, the shipped
``published_runs`` set (vtrain/data/published_runs, its README gives each source) as workloads, and the error
per source.

:func:`pasted_row` runs on every measured row before it is simulated (task=validate, :func:`published_rows`): it
rewrites the cells a table writes in its own words (:mod:`vtrain.validation.spellings`) and leaves every other
cell as it is, so a CSV in vtrain's own schema reads exactly as before.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence, Tuple

from vtrain.errors import ConfigError
from vtrain.validation.csv_io import MeasuredRow, normalise_header
from vtrain.validation.metrics import ErrorSummary, summarise_ape
from vtrain.validation.recipes import recipe_cells
from vtrain.validation.spellings import (
    framework_cell,
    gpu_cell,
    model_variant_cells,
    precision_cells,
    sharding_cells,
)

ZERO_IN_NAME = re.compile(r"\bzero[-_\s]?(?:stage[-_\s]?)?([0-3])\b", re.IGNORECASE)  # "DeepSpeed ZeRO-3"
SOURCE_COLUMN = "source_key"  # a compiled table's source of each row: the error is given per source too
# the architectures vtrain's model schema has (decoder-only transformers, dense or mixture-of-experts); a row of
# another (hybrid Mamba-Transformer: Nemotron-H, Nemotron 3) is a skip with this reason
KNOWN_ARCHITECTURES = ("dense", "moe", "transformer", "decoder", "mla", "gqa", "mha")
# the columns of a data-parallel mode in a compiled table ("DDP (FSDP=0; ...)", "PyTorch FSDP FULL_SHARD")
SHARDING_COLUMNS = ("zero_or_fsdp", "fsdp_or_zero", "data_parallel_mode", "dp_mode", "dp_impl")
# a model-parallel size of 2020-era Megatron-LM (--model-parallel-size, before pipelines: the tensor degree)
MODEL_PARALLEL_COLUMNS = ("mp_size", "model_parallel_size", "mp")


def _architecture(row: MeasuredRow) -> None:
    arch = row.get("arch_type") or row.get("architecture")
    if arch is None:
        return
    words = arch.strip().lower().replace("_", "-").split("-")
    if any(w in ("mamba", "ssm", "hybrid", "rwkv", "hyena") for w in words):
        raise ConfigError(f"row {row.index}: arch_type={arch}: hybrid Mamba / state-space layers are not in "
                          "vtrain's model schema (decoder-only transformers, dense or mixture-of-experts)")


def _measurement(values: Dict[str, str], row: MeasuredRow) -> None:
    """A ``metric``/``value`` pair (the table's primary figure and its kind) as the column it names, where that
    column is empty."""
    metric, value = row.get("metric"), row.get("value")
    if metric is None or value is None:
        return
    column = normalise_header(metric)
    if row.get(column) is None:
        values[column] = value


def pasted_row(row: MeasuredRow) -> Tuple[MeasuredRow, List[str]]:
    """(the row with its pasted cells in the row builder's spellings, notes on what was read or ignored). Raises
    ConfigError (the row's skip reason) for an architecture outside the schema or a cell none of the spellings
    reads."""
    _architecture(row)
    values = dict(row.values)
    notes: List[str] = []
    _measurement(values, row)
    framework = row.get("framework")
    if framework is not None and row.get("stack") is None:
        read = framework_cell(framework)
        if read is not None:
            values["framework"], release = read
            if release:
                values.setdefault("framework_release", release)
        zero = ZERO_IN_NAME.search(framework)  # "DeepSpeed ZeRO-3": the stage, where no column states one
        if zero is not None and row.get("zero_stage") is None and row.get("sharding_strategy") is None:
            values["zero_stage"] = zero.group(1)
    precision = row.get("precision")
    if precision is not None:
        cells = precision_cells(precision)
        if cells is not None:
            values["precision"] = cells["precision"] if "precision" in cells else precision
            if "mp_mode" in cells and row.get("mp_mode") is None:
                values["mp_mode"] = cells["mp_mode"]
    gpu = row.get("gpu")
    if gpu is not None:
        values["gpu"] = gpu_cell(gpu) or gpu
    for column in SHARDING_COLUMNS:
        raw = row.get(column)
        if raw is not None and not any(row.get(c) is not None for c in ("fsdp", "sharding_strategy", "zero_stage")):
            try:
                values.update(sharding_cells(raw))
            except ConfigError as err:
                raise ConfigError(f"row {row.index}: {column}={raw}: {str(err).split(': ', 1)[1]}") from None
    if row.get("tp") is None and row.get("pp") is None:
        mp = next((row.get(c) for c in MODEL_PARALLEL_COLUMNS if row.get(c) is not None), None)
        if mp is not None:
            values["tp"] = mp
    model = row.get("model")
    if model is not None:
        for column, value in model_variant_cells(model).items():
            if row.get(column) is None:
                values[column] = value
    recipe = recipe_cells(MeasuredRow(row.index, values))
    if recipe:  # what the framework's recipe for the model sets (validation.recipes, each entry citing the code)
        values.update(recipe)
        notes.append(f"from {values.get('framework')}'s recipe for the model: "
                     + ", ".join(f"{k}={v}" for k, v in recipe.items()))
    return _expert_layout(_ignored_settings(MeasuredRow(row.index, values), notes), notes), notes


_YES = ("1", "true", "yes", "y", "on", "enabled")


def _ignored_settings(row: MeasuredRow, notes: List[str]) -> MeasuredRow:
    """A setting the framework itself ignores, dropped with a note: TP communication overlap at tp=1 or with
    sequence parallelism stated off (Megatron-Bridge's and NeMo's CommOverlapConfig._get_model_comm_overlap_cfgs,
    megatron/bridge/training/comm_overlap.py: "Disabling tensor parallel communication overlap due to TP size < 2"
    / "due to sequence_parallel=False", and tp_comm_overlap set False)."""
    overlap = row.get("tp_comm_overlap")
    if overlap is None or overlap.strip().lower() not in _YES:
        return row
    sp = row.get("sequence_parallel")
    if (row.get("tp") or "1") == "1":
        why = "tp_comm_overlap ignored at tp=1 (the framework turns it off: no TP collectives)"
    elif sp is not None and sp.strip().lower() not in _YES:
        why = f"tp_comm_overlap ignored with sequence_parallel={sp} (the framework turns it off)"
    else:
        return row
    notes.append(why)
    return MeasuredRow(row.index, {k: v for k, v in row.values.items() if k != "tp_comm_overlap"})


def _int_cell(row: MeasuredRow, column: str, default: int) -> int:
    raw = (row.get(column) or "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


def _expert_layout(row: MeasuredRow, notes: List[str]) -> MeasuredRow:
    """A stated expert-parallel size no pipeline stage can hold, simulated at the largest one it holds, with a
    note. Megatron-Core draws the expert-parallel x expert-tensor-parallel ranks from a stage's tp x dp x cp ranks
    (megatron/core/parallel_state.py, initialize_model_parallel: the expert grid is the same world split by pp);
    a table that states a larger ep (Megatron-Bridge 25.09's DeepSeek-V3 MXFP8 variant: PP8 on 256 GB200 with
    gradient accumulation 64, i.e. 32 ranks a stage, beside EP64) states a run that could not have been laid out
    as written. The largest divisor of the stated ep that the stage holds keeps the experts per rank closest to
    the table's; the row is simulated, not skipped, and says so (validation.csv: validation_notes)."""
    ep, gpus = _int_cell(row, "ep", 1), _int_cell(row, "num_gpus", 0)
    if ep == 1 or gpus == 0:
        return row
    tp, pp, cp = _int_cell(row, "tp", 1), _int_cell(row, "pp", 1), _int_cell(row, "cp", 1)
    dp = _int_cell(row, "dp", 0)
    stage = tp * dp * cp if dp else gpus // pp  # the ranks of one pipeline stage
    etp = _int_cell(row, "etp", 1)  # the Megatron-Bridge MoE recipes set expert_tensor_parallel_size=1
    if (not dp and gpus % pp) or stage % (etp * ep) == 0 or stage % etp:
        return row  # a layout error of another kind (or none): row_workload names it
    held = max(e for e in range(1, ep + 1) if ep % e == 0 and stage % (etp * e) == 0)
    notes.append(f"ep={ep} cannot be laid out on a pipeline stage of {stage} ranks (Megatron-Core: ep x etp must "
                 f"divide tp x dp x cp of a stage); simulated at ep={held}, the largest that stage holds")
    return MeasuredRow(row.index, {**row.values, "ep": str(held)})


def summary_by_source(results: Sequence[Any]) -> Dict[str, ErrorSummary]:
    """The error summary of each ``source_key`` (in first-seen order), over rows that name one; {} for a file
    without the column."""
    keys = list(dict.fromkeys(r.row.get(SOURCE_COLUMN) for r in results if r.row.get(SOURCE_COLUMN)))
    out: Dict[str, ErrorSummary] = {}
    for key in keys:
        mine = [r for r in results if r.row.get(SOURCE_COLUMN) == key]
        ape = [r.ape_pct for r in mine if r.ape_pct is not None]
        out[key] = summarise_ape(ape, skipped=len(mine) - len(ape))
    return out


def source_lines(results: Sequence[Any]) -> List[str]:
    """One line per source: ``<source_key> (n rows): <MAPE line>``; [] for a file without sources."""
    return [f"{key}: {s.line()}" for key, s in summary_by_source(results).items()]
