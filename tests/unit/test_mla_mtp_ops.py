"""Every op of one DeepSeek-V3 MLA attention block and of its multi-token-prediction module, per GPU and
micro-batch, written by hand (bf16, tp 2 with sequence parallelism, cp 1, one 4,096-token sequence).

Shapes from DeepSeek-V3's config.json (hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128) and the MLA equations of the DeepSeek-V2 report
(Sec. 2.1.2-2.1.3): the query goes down to the 1536-wide latent, is RMS-normed and goes up to the heads' no-RoPE
and RoPE parts (64 local heads x 192); keys and values go down to the 512-wide latent plus the one 64-wide RoPE
key shared by all heads, the latent is RMS-normed and goes up to each head's 128 key and 128 value features.
Megatron-Core's MLASelfAttention: the down-projections replicated on every TP rank, the up-projections column-
and the output projection row-parallel. Element-wise kernels: an RMSNorm reads and writes its input (2 passes
of bf16), its backward reads the input and the gradient and writes the gradient (3); RoPE rotates the
queries' rope dims (64 heads) and the shared rope key (1) in two kernels, read + write.
MTP (DeepSeek-V3 report Sec. 2.2, Megatron-Core's MultiTokenPredictionLayer): the embedding of the shifted tokens
(a gather: read + write), RMSNorm of it and of the hidden state, eh_proj [2h -> h] column-parallel; backward
both norms in two kernels (3 passes each) and the embedding gradient (a scatter-add: read + write).
"""
from vtrain import compose
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import FlashAttention, Gemm, MemoryOp
from vtrain.workload.partition import partition

DEEPSEEK = ["+model=deepseek_v3", "+cluster=h800x2048", "parallelism.tp=2", "parallelism.sequence_parallel=true",
            "parallelism.pp=16", "parallelism.dp=64", "parallelism.ep=64", "training.seq_len=4096",
            "training.global_batch_size=4096", "training.precision=bf16", "parallelism.micro_batch_size=1",
            "parallelism.recompute=selective", "parallelism.recompute_modules=mla_up_proj"]
TOKENS, H, N = 4096, 7168, 128 // 2  # tokens per rank, hidden, heads per TP rank
BF16 = 2


def graph():
    w = build_workload(compose(DEEPSEEK))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    return build_model_graph(w.model, w.plan, comm.tp, comm.cp, comm.ep)


def row(op):
    if isinstance(op, Gemm):
        return ("gemm", op.name, op.m, op.n, op.k)
    if isinstance(op, MemoryOp):
        return ("mem", op.name, op.bytes, op.kernels)
    assert isinstance(op, FlashAttention)
    return ("flash", op.name, op.batch_heads, op.seq_len, op.head_dim, op.kv_len, op.backward)


def gemm(name, m, n, k):
    return [("gemm", name, m, n, k), ("gemm", f"{name}.dgrad", m, k, n), ("gemm", f"{name}.wgrad", k, n, m)]


def mla_rows(ops):
    return [row(op) for op in ops if isinstance(op, (Gemm, MemoryOp, FlashAttention))
            and (op.name.startswith(("mla.", "flash_attn")) or op.name.split(".")[0] == "proj")]


def test_mla_block_ops_by_hand():
    g = graph()
    q_down, q_up = gemm("mla.q_down", TOKENS, 1536, H), gemm("mla.q_up", TOKENS, N * 192, 1536)
    kv_down, kv_up = gemm("mla.kv_down", TOKENS, 512 + 64, H), gemm("mla.kv_up", TOKENS, N * (128 + 128), 512)
    proj = gemm("proj", TOKENS, H, N * 128)
    rope = 2.0 * TOKENS * (N + 1) * 64 * BF16
    core = ("flash", "flash_attn", N, 4096, (192 + 128) // 2, 4096, False)
    forward = [q_down[0], ("mem", "mla.q_norm", 2.0 * TOKENS * 1536 * BF16, 1), q_up[0], kv_down[0],
               ("mem", "mla.kv_norm", 2.0 * TOKENS * 512 * BF16, 1), kv_up[0], ("mem", "mla.rope", rope, 2),
               core, proj[0]]
    backward = [*proj[1:], ("flash", "flash_attn.bwd", *core[2:6], True), ("mem", "mla.rope.bwd", rope, 2),
                *kv_up[1:], ("mem", "mla.kv_norm.bwd", 3.0 * TOKENS * 512 * BF16, 1), *kv_down[1:], *q_up[1:],
                ("mem", "mla.q_norm.bwd", 3.0 * TOKENS * 1536 * BF16, 1), *q_down[1:]]
    for layer in (g.layer, g.moe_layer):
        assert mla_rows(layer.forward.ops) == forward
        assert mla_rows(layer.backward.ops) == backward
        # recompute_modules=mla_up_proj: the up-projections and RoPE run again before the backward
        assert mla_rows(layer.recompute.ops) == [q_up[0], kv_up[0], ("mem", "mla.rope", rope, 2)]


def test_mtp_module_ops_by_hand():
    mtp = graph().mtp
    act = TOKENS * H * BF16 / 2  # sequence-parallel: 1/tp of the tokens' hidden states
    proj = gemm("mtp.eh_proj", TOKENS, H // 2, 2 * H)
    assert [row(op) for op in mtp.forward.ops] == [("mem", "mtp.embedding", 2 * act, 2),
                                                   ("mem", "mtp.enorm", 2 * act, 1), ("mem", "mtp.hnorm", 2 * act, 1),
                                                   proj[0]]
    assert [row(op) for op in mtp.backward.ops] == [*proj[1:], ("mem", "mtp.norms.bwd", 6 * act, 2),
                                                    ("mem", "mtp.embedding.grad", 2 * act, 2)]
    assert mtp.recompute.ops == ()
