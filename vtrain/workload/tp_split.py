"""The rule of tensor parallelism on a model, said once: tp divides the attention heads, the K/V heads and the
MLP's hidden size (Megatron-LM splits each across the TP ranks: Shoeybi et al. 2019, Sec. 3; Megatron-Core's
``divide`` asserts it). The config checks, the search space and the case studies all ask here."""
from __future__ import annotations

from typing import Optional, Tuple

from vtrain.workload.model import ModelSpec


def tp_misfit(model: ModelSpec, tp: int) -> Optional[Tuple[str, int]]:
    """The first of (attention heads, kv heads, ffn_hidden_size) that ``tp`` does not divide, with its value;
    None when it divides all three."""
    for what, value in (("attention heads", model.num_heads), ("kv heads", model.num_kv_heads),
                        ("ffn_hidden_size", model.ffn_hidden_size)):
        if value % tp:
            return what, value
    return None


def tp_divides(model: ModelSpec, tp: int) -> bool:
    """Whether ``tp`` splits the model's heads, kv heads and MLP evenly (:func:`tp_misfit`)."""
    return tp_misfit(model, tp) is None
