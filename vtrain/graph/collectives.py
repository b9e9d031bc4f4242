"""Where the communication plan's collectives sit in the operator graph: the f/g pair around a tensor-parallel
block, the TP collectives of each component, the context-parallel exchanges around the attention core, and the
K/V features those exchange. :mod:`vtrain.comm.tp`, :mod:`vtrain.comm.cp` and :mod:`vtrain.comm.ep` fill them;
the graph builder (:mod:`vtrain.graph.builder`) places them between its GEMMs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from vtrain.graph.ops import Collective
from vtrain.workload.model import ModelSpec

NONE: Tuple[Collective, ...] = ()


@dataclass(frozen=True, slots=True)
class TpOperator:
    """The collectives of one f/g operator pair around a block: forward enter/exit, backward enter/exit."""

    enter: Tuple[Collective, ...] = NONE  # forward, before the column-parallel GEMM
    exit: Tuple[Collective, ...] = NONE  # forward, after the row-parallel GEMM
    enter_backward: Tuple[Collective, ...] = NONE  # backward of ``enter``
    exit_backward: Tuple[Collective, ...] = NONE  # backward of ``exit``

    def all(self) -> Tuple[Collective, ...]:
        return self.enter + self.exit + self.enter_backward + self.exit_backward


@dataclass(frozen=True, slots=True)
class TpComms:
    """The TP collectives of the model's components, per micro-batch, for one GPU of a TP group."""

    attention: TpOperator  # QKV ... projection
    mlp: TpOperator  # FC1 ... FC2
    embedding: TpOperator  # vocab-parallel embedding: its output is summed over the TP ranks
    logits: TpOperator  # the output layer's input (column-parallel over the vocabulary)
    cross_entropy: Tuple[Collective, ...]  # max, sum-exp and target-logit all-reduces (fp32, per token)

    def per_layer(self) -> Tuple[Collective, ...]:
        return self.attention.all() + self.mlp.all()

    def head(self) -> Tuple[Collective, ...]:
        return self.logits.all() + self.cross_entropy


@dataclass(frozen=True, slots=True)
class CpComms:
    forward: Tuple[Collective, ...]  # before the attention core
    backward: Tuple[Collective, ...]  # before (ring: with) the attention backward
    backward_after: Tuple[Collective, ...]  # after the attention backward (all-gather and all-to-all variants)
    forward_after: Tuple[Collective, ...] = ()  # after the attention core (all-to-all variant: the output)


def kv_features(model: ModelSpec, expands_kv: bool = False) -> int:
    """K and V features per token that the CP ranks exchange (all heads, before the TP split): MLA's
    up-projected keys (qk_head_dim + qk_rope_head_dim per head) and values (v_head_dim per head), as
    Megatron-Core's MLA hands them to the attention core; else the K/V heads (every query head's when
    ``expands_kv``)."""
    if model.is_mla:
        return model.num_heads * (model.mla_qk_dim + model.v_head_dim)
    return 2 * (model.q_size if expands_kv else model.kv_size)
