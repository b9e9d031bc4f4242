"""Context-parallel K/V exchange bytes (comm.cp), hand-computed."""
from dataclasses import replace

import pytest

from vtrain.comm.cp import cp_comms
from vtrain.workload.enums import CpComm, NormType, PositionEmbedding
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

# Llama-3.1-405B's attention: 128 query heads, 8 K/V heads of 128
LLAMA = ModelSpec(name="llama", num_layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8,
                  ffn_hidden_size=53248, gated_mlp=True, norm=NormType.RMSNORM,
                  position_embedding=PositionEmbedding.ROPE, use_bias=False, dropout=0.0, vocab_size=128256,
                  tied_embeddings=False, max_seq_len=262144)
PLAN = ParallelPlan(tp=8, pp=8, dp=1, cp=8, micro_batch_size=1, global_batch_size=8, seq_len=262144,
                    sequence_parallel=True, flash_attention=True, cp_comm=CpComm.ALLGATHER)


def test_allgather_exchanges_the_grouped_heads_in_the_activation_dtype():
    comms = cp_comms(LLAMA, PLAN)
    kv = 2 * 262144 * (8 * 128) / 8 * 2  # K and V of the whole sequence, this TP rank's heads, bf16
    assert [c.bytes for c in comms.forward + comms.backward + comms.backward_after] == [kv, kv, kv]


def test_a_stack_that_repeats_kv_heads_exchanges_all_heads_and_fp32_gradients():
    """torchtitan repeats the 8 K/V heads to 128 before SDPA; PyTorch's CP reduces the K/V gradients in fp32."""
    comms = cp_comms(LLAMA, PLAN, expands_kv=True, grads_fp32=True)
    kv = 2 * 262144 * (128 * 128) / 8 * 2
    assert comms.forward[0].bytes == kv and comms.backward[0].bytes == kv
    assert comms.backward_after[0].bytes == pytest.approx(2 * kv)
    ring = cp_comms(LLAMA, replace(PLAN, cp_comm=CpComm.P2P), expands_kv=True, grads_fp32=True)
    assert ring.backward[0].bytes == pytest.approx(kv + 2 * kv)  # K/V again and their fp32 gradients
