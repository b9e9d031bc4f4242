"""The table of valid ranges (:mod:`vtrain.workload.bounds` and every spec field's domain) as Markdown, for
``docs/configs.md``: ``python -m vtrain.config.domains_doc`` prints it, ``--write docs/configs.md`` replaces the
table between its markers (a test checks the page holds what this renders)."""
from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from vtrain.workload import bounds as B
from vtrain.workload.fields import Domain
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import PAR, TRAIN, ParallelPlan
from vtrain.workload.system import ClusterSpec, NetworkTier

BEGIN, END = "<!-- domains:begin (python -m vtrain.config.domains_doc --write docs/configs.md) -->", \
    "<!-- domains:end -->"
Row = Tuple[str, str, str, str]  # key, type, valid range, why

PRICING: Sequence[Tuple[str, str, Domain]] = (
    ("pricing.usd_per_gpu_hour.<gpu>", "float", B.USD_PER_GPU_HOUR),
    ("pricing.usd_per_kwh", "float", B.USD_PER_KWH),
    ("pricing.grid_kg_co2_per_kwh", "float", B.KG_CO2_PER_KWH),
)
CROSS: Sequence[Row] = (
    ("model x cluster", "rule", f"{B.WEIGHT_BYTES_PER_PARAM} B x parameters <= GPUs x HBM",
     "bf16 weights alone must fit in all the cluster's memory"),
    ("cluster.gpus_per_node x num_nodes", "rule", f"<= {B.MAX_CLUSTER_GPUS:,}",
     "~256x the 16,384 H100 of Llama 3 405B's run, the largest published"),
    ("training.global_batch_size x seq_len", "rule", f"<= {B.MAX_BATCH_TOKENS:,} tokens",
     "~1,000x the 16M-token batch of Llama 3 405B"),
)


def _type_name(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is typing.Union and args:
        return f"{_type_name(args[0])} or null"
    if typing.get_origin(tp) is dict:
        return f"map of {_type_name(typing.get_args(tp)[1])}"
    return getattr(tp, "__name__", str(tp))


def spec_rows(cls: type, prefix: str, group: str = "") -> List[Row]:
    """One row per numeric field of spec ``cls`` with a domain (a field of ``group`` only where given)."""
    hints = typing.get_type_hints(cls)
    out: List[Row] = []
    for f in dataclasses.fields(cls):
        d: Optional[Domain] = f.metadata.get("domain")
        if not isinstance(d, Domain) or (group and f.metadata.get("group") != group):
            continue
        out.append((f"{prefix}.{f.name}", _type_name(hints[f.name]), d.rule().removeprefix("must be "), d.why))
    return out


def all_rows() -> List[Tuple[str, List[Row]]]:
    """(section, rows) for model, cluster, parallelism, training, pricing and the cross-field rules."""
    cluster = spec_rows(ClusterSpec, "cluster")
    for tier in ("intra_node", "inter_node"):
        cluster += spec_rows(NetworkTier, f"cluster.{tier}")
    pricing = [(k, t, d.rule().removeprefix("must be "), d.why) for k, t, d in PRICING]
    return [("model", spec_rows(ModelSpec, "model")), ("cluster", cluster),
            ("parallelism", spec_rows(ParallelPlan, "parallelism", PAR)),
            ("training", spec_rows(ParallelPlan, "training", TRAIN)), ("pricing", pricing),
            ("across fields", list(CROSS))]


def render() -> str:
    lines = [BEGIN]
    for section, rows in all_rows():
        lines += ["", f"**{section}**", "", "| key | type | valid | why |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {t} | {v} | {w or '-'} |" for k, t, v, w in rows]
    return "\n".join([*lines, "", END])


def write(path: Path) -> None:
    """Replace the table between the markers of ``path`` with :func:`render`."""
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    path.write_text(head + render() + tail)


def main(argv: Sequence[str] = ()) -> int:
    if len(argv) == 2 and argv[0] == "--write":
        write(Path(argv[1]))
    else:
        print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
