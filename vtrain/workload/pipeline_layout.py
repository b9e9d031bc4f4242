"""Megatron-Core's explicit pipeline layout (``--pipeline-model-parallel-layout``), read as Megatron reads it.

The string lists the pipeline positions in order q = chunk·pp + stage (Megatron-Core's
``PipelineParallelLayerLayout``: ``layout[vpp_rank * pp + pp_rank]``), separated by ``|``; each position is a
string of layer characters: ``E`` the embedding, ``t`` a transformer layer, ``m`` an MTP module, ``L`` the
output layer and loss. ``x*n`` repeats one character and ``(...)*n`` a group; commas are cosmetic. For example
``Et*3|(tt|)*29,m|L`` is DeepSeek-V3's 61 layers over 32 positions: the embedding and 3 layers, 29 positions
of 2 layers, the MTP module alone, the loss alone.

Rules (Megatron-Core's ``validate_layer_layout``): the number of positions is a multiple of pp (the quotient
is the virtual pipeline size), the embedding comes first and the loss last, each exactly once, and the
``t`` count equals the model's layers. vtrain places the MTP modules with the loss on the last position
(:mod:`vtrain.workload.partition`): an ``m`` elsewhere is counted there (the layout's ``m`` count must
equal the model's MTP modules).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Tuple

from vtrain.errors import ConfigError

_LAYER_CHARS = frozenset("ELtm")
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")  # (ab|cd)*n -> n copies of ab|cd (Megatron's parse_str_to_list)
_REPEAT = re.compile(r"(.)\*(\d+)")  # x*n -> n copies of x


@lru_cache(maxsize=64)
def parse_layout(layout: str) -> Tuple[str, ...]:
    """The positions of a layout string, each as its layer characters (``E``, ``t``, ``m``, ``L``)."""
    key = f"parallelism.pipeline_layout={layout}"
    text = layout.replace(",", "").replace(" ", "")
    for pattern in (_GROUP, _REPEAT):
        text = pattern.sub(lambda x: x.group(1) * int(x.group(2)), text)
    bad = sorted(set(text) - _LAYER_CHARS - {"|"})
    if bad:
        raise ConfigError(f"{key}: unknown layer character(s) {''.join(bad)!r}; known: E (embedding), "
                          "t (transformer layer), m (MTP), L (loss), | (next position), x*n and (...)*n repeats")
    return tuple(text.split("|"))


def layout_layers(layout: str, num_layers: int, pp: int, chunks: int, mtp_layers: int = 0) -> Tuple[int, ...]:
    """Transformer layers per position q = chunk·pp + stage, after Megatron-Core's checks (module doc)."""
    key = f"parallelism.pipeline_layout={layout}"
    positions = parse_layout(layout)
    if len(positions) != pp * chunks:
        hint = (f"set virtual_stages={len(positions) // pp}" if len(positions) % pp == 0 else
                f"Megatron-Core needs a multiple of pp={pp}")
        raise ConfigError(f"{key}: {len(positions)} positions, but pp*virtual_stages={pp}*{chunks}={pp * chunks} "
                          f"({hint})")
    flat = "".join(positions)
    if flat.count("E") != 1 or flat.count("L") != 1:
        raise ConfigError(f"{key}: the embedding E and the loss L must each appear exactly once")
    if not (positions[0].startswith("E") and positions[-1].endswith("L")):
        raise ConfigError(f"{key}: the embedding E must open the first position and the loss L close the last")
    counts = tuple(pos.count("t") for pos in positions)
    if sum(counts) != num_layers:
        raise ConfigError(f"{key}: {sum(counts)} transformer layers t, but the model has num_layers={num_layers}")
    if flat.count("m") != mtp_layers:
        raise ConfigError(f"{key}: {flat.count('m')} MTP modules m, but the model has mtp_layers={mtp_layers}")
    return counts
