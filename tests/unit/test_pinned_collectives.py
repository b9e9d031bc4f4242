"""Every collective of one iteration, count and size, pinned against a table written by hand from
Megatron-Core's code, for two small plans: a dense TP2 x PP2 x CP2 x DP2 plan with sequence parallelism and
the distributed optimizer (ZeRO-1), and an MoE TP2 x PP2 x CP2 x DP4 plan with EP4 (ETP = TP = 2, EDP 2).

Where each row comes from (Megatron-Core, megatron/core/...):
- tensor_parallel/layers.py + TE's LayerNormColumnParallelLinear / RowParallelLinear with SP: per layer and
  micro-batch an all-gather before QKV and FC1 and a reduce-scatter after the projection and FC2; backward
  the mirror (reduce-scatter of each column-parallel input gradient, all-gather of each row-parallel output
  gradient). Message: the gathered activation, s/cp x b x h x 2 B.
- VocabParallelEmbedding (reduce_scatter_to_sequence_parallel_region) on the first stage; the output layer's
  input all-gather (and its backward reduce-scatter) on the last stage.
- tensor_parallel/cross_entropy.py (_VocabParallelCrossEntropy.forward): THREE all-reduces over TP of
  s/cp x b fp32 values: the logits' max, the predicted (target) logits and the sum of exp-logits.
- TE's AttnFuncWithCPAndKVP2P (cp_comm_type p2p): K and V go around the CP ring (an all-gather of the sequence's
  K/V on this TP rank: s x b x 2 x g x d / t x 2 B); the backward sends K/V again with their gradients (2x).
- pipeline_parallel/p2p_communication.py: one activation each way per micro-batch and boundary, s/cp x b x h /
  t x 2 B with SP (already scattered).
- distributed/distributed_data_parallel.py + param_and_grad_buffer.py: the fp32 main grads of a stage (its
  layers per GPU + the vocab-parallel embedding or the final norm and output layer) reduce-scattered over the
  data-parallel group with CP (dp x cp ranks) with the distributed optimizer; after the step its bf16
  parameters all-gathered over the same group. Routed experts over the expert-data-parallel group instead.
- transformer/moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher): per MoE layer and micro-batch, the top-k
  copies of the routed tokens (s/cp/t x b x k x h x 2 B) all-to-all over EP, then all-gathered over ETP;
  combine: reduce-scatter over ETP, all-to-all back; backward the mirror.
"""
from collections import Counter

from vtrain import compose
from vtrain.comm.plan import build_comm_plan
from vtrain.config.build import build_workload
from vtrain.graph.builder import build_model_graph
from vtrain.graph.ops import Collective
from vtrain.workload.partition import partition

COMMON = ["+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=2", "parallelism.cp=2",
          "parallelism.sequence_parallel=true", "parallelism.distributed_optimizer=true",
          "parallelism.micro_batch_size=1", "parallelism.recompute=none"]
DENSE = ["+model=llama3_8b", *COMMON, "parallelism.dp=2", "training.global_batch_size=8", "training.seq_len=8192"]
MOE = ["+model=qwen3_30b_a3b", *COMMON, "parallelism.dp=4", "parallelism.ep=4", "training.global_batch_size=16",
       "training.seq_len=4096"]


def per_iteration(overrides):
    """{stage: Counter{(name, kind, group, group size, bytes): count}} from the comm plan's listing."""
    w = build_workload(compose(overrides))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    out = {0: Counter(), 1: Counter()}
    for e in comm.entries():
        for s in e.stages:
            op = e.op
            out[s][(op.name, op.kind.value, op.group.value, op.group_size, op.bytes)] += e.count
    return out


def tp_layer_rows(act_bytes, count):
    return {(n, k, "tp", 2, act_bytes): count for n, k in (
        ("qkv.ag", "all_gather"), ("proj.rs", "reduce_scatter"), ("qkv.bwd.rs", "reduce_scatter"),
        ("proj.bwd.ag", "all_gather"), ("fc1.ag", "all_gather"), ("fc2.rs", "reduce_scatter"),
        ("fc1.bwd.rs", "reduce_scatter"), ("fc2.bwd.ag", "all_gather"))}


def two_stages(layers, m, tokens, act, dp, params):
    """Per stage of a two-stage pipeline: the layers' rows, the embedding's TP collectives on the first, the
    output layer's and the cross-entropy's on the last (3 fp32 all-reduces of one value per token), and each
    stage's gradient reduce-scatter (fp32) and parameter all-gather (bf16) of its ``params`` over ``dp``."""
    edges = ({("embedding.rs", "reduce_scatter", "tp", 2, act): m, ("embedding.bwd.ag", "all_gather", "tp", 2, act): m},
             {("logits.ag", "all_gather", "tp", 2, act): m, ("logits.bwd.rs", "reduce_scatter", "tp", 2, act): m,
              **{(f"cross_entropy.ar{i}", "all_reduce", "tp", 2, tokens * 4.0): m for i in range(3)}})
    return {s: Counter({**layers, **edges[s], ("dp.grad.chunk0", "reduce_scatter", "dp", dp, 4.0 * params[s]): 1,
                        ("dp.param_gather", "all_gather", "dp", dp, 2.0 * params[s]): 1}) for s in (0, 1)}


def dense_hand_table():
    m, layers, tokens, h = 4, 16, 8192 // 2, 4096  # micro-batches = 8 / (dp 2 x mb 1); 32 layers / pp 2
    act = tokens * h * 2.0
    n = layers * m
    kv = 8192 * 2 * 8 * 128 / 2 * 2.0  # the sequence's K and V on one TP rank (g = 8 KV heads, d = 128)
    common = {**tp_layer_rows(act, n), ("cp.kv_ring", "all_gather", "cp", 2, kv): n,
              ("cp.kv_ring.bwd", "all_gather", "cp", 2, 2 * kv): n, ("p2p", "p2p", "pp", 2, act / 2): 2 * m}
    layer = (h * (4096 + 2 * 1024) + 4096 * h) / 2 + 3 * h * 14336 / 2 + 2 * h  # attention, MLP split; norms not
    vocab_rows = 128256 / 2  # 128,256 is a multiple of 128 x tp: no padding
    stage0 = layers * layer + vocab_rows * h
    stage1 = layers * layer + h + vocab_rows * h  # final norm, output layer
    return two_stages(common, m, tokens, act, 4, (stage0, stage1))


def test_dense_plan_every_collective_pinned():
    assert per_iteration(DENSE) == dense_hand_table()


def moe_hand_table():
    m, layers, tokens, h = 4, 24, 4096 // 2, 2048  # 16 / (dp 4 x mb 1) micro-batches; 48 layers / pp 2
    act = tokens * h * 2.0
    n = layers * m
    kv = 4096 * 2 * 4 * 128 / 2 * 2.0  # g = 4 KV heads
    routed = tokens // 2 * 8 * h * 2.0  # s/cp/t tokens x top-8 copies (SP: each TP rank routes its share)
    attention = (h * (4096 + 2 * 512) + 4096 * h + 2 * 128) / 2  # q/k/v/o split over TP (+ q/k norms)
    dense_layer = attention + 2 * h + h * 128  # + 2 norms, the router (replicated)
    experts_layer = 128 * 3 * h * 768 / (4 * 2)  # 128 experts over EP 4 x ETP 2
    vocab_rows = 152064 / 2  # 151,936 padded to a multiple of 128 x tp = 256
    rows = {**tp_layer_rows(act, n), ("cp.kv_ring", "all_gather", "cp", 2, kv): n,
            ("cp.kv_ring.bwd", "all_gather", "cp", 2, 2 * kv): n, ("p2p", "p2p", "pp", 2, act / 2): 2 * m,
            ("moe.dispatch", "all_to_all", "ep", 4, routed): n, ("moe.combine", "all_to_all", "ep", 4, routed): n,
            ("moe.dispatch.bwd", "all_to_all", "ep", 4, routed): n,
            ("moe.combine.bwd", "all_to_all", "ep", 4, routed): n,
            ("moe.etp.ag", "all_gather", "etp", 2, 2 * routed): n,
            ("moe.etp.rs", "reduce_scatter", "etp", 2, 2 * routed): n,
            ("moe.etp.bwd.ag", "all_gather", "etp", 2, 2 * routed): n,
            ("moe.etp.bwd.rs", "reduce_scatter", "etp", 2, 2 * routed): n,
            ("edp.grad.chunk0", "reduce_scatter", "edp", 2, 4.0 * layers * experts_layer): 1,
            ("edp.param_gather", "all_gather", "edp", 2, 2.0 * layers * experts_layer): 1}
    for name in ("fc1.ag", "fc2.rs", "fc1.bwd.rs", "fc2.bwd.ag"):  # no dense MLP: every layer is MoE
        rows.pop((name, "all_gather" if name.endswith("ag") else "reduce_scatter", "tp", 2, act))
    stage0 = layers * dense_layer + vocab_rows * h
    stage1 = layers * dense_layer + h + vocab_rows * h
    return two_stages(rows, m, tokens, act, 8, (stage0, stage1))


def test_moe_plan_every_collective_pinned():
    assert per_iteration(MOE) == moe_hand_table()


def graph_collectives(overrides):
    """What the simulator runs: the collectives in each component graph's passes, per micro-batch."""
    w = build_workload(compose(overrides))
    comm = build_comm_plan(w, partition(w.model, w.plan))
    g = build_model_graph(w.model, w.plan, comm.tp, comm.cp, comm.ep)
    def names(c):
        return Counter(op.name for p in (c.forward, c.backward, c.recompute) for op in p.ops
                       if isinstance(op, Collective))
    return {k: names(c) for k, c in (("layer", g.layer), ("moe_layer", g.moe_layer), ("embedding", g.embedding),
                                     ("head", g.head)) if c is not None}


def test_graphs_run_the_pinned_collectives_per_micro_batch():
    tp_attn = {"qkv.ag": 1, "proj.rs": 1, "qkv.bwd.rs": 1, "proj.bwd.ag": 1, "cp.kv_ring": 1, "cp.kv_ring.bwd": 1}
    tp_mlp = {"fc1.ag": 1, "fc2.rs": 1, "fc1.bwd.rs": 1, "fc2.bwd.ag": 1}
    head = Counter({"logits.ag": 1, "logits.bwd.rs": 1, "cross_entropy.ar0": 1, "cross_entropy.ar1": 1,
                    "cross_entropy.ar2": 1})
    dense = graph_collectives(DENSE)
    assert dense["layer"] == Counter({**tp_attn, **tp_mlp})
    assert dense["head"] == head  # the vocab-parallel cross entropy's three all-reduces
    assert dense["embedding"] == Counter({"embedding.rs": 1, "embedding.bwd.ag": 1})
    moe = graph_collectives(MOE)
    ep = {n: 1 for n in ("moe.dispatch", "moe.combine", "moe.dispatch.bwd", "moe.combine.bwd", "moe.etp.ag",
                         "moe.etp.rs", "moe.etp.bwd.ag", "moe.etp.bwd.rs")}
    # Megatron-Core's MoEAlltoAllTokenDispatcher, dropless: preprocess all-gathers the tokens per expert over the
    # TP x EP group (gather_from_sequence_parallel_region) once per forward; token_dispatch sends the permuted
    # routing probabilities beside the tokens (an all-to-all of its own), and its autograd sends their gradients back
    bookkeeping = {"moe.dispatch.splits.ag": 1, "moe.dispatch.probs": 1, "moe.dispatch.probs.bwd": 1}
    assert moe["moe_layer"] == Counter({**tp_attn, **ep, **bookkeeping})
    assert moe["head"] == head


def test_full_recompute_runs_the_forward_collectives_again():
    full = graph_collectives([*DENSE, "parallelism.recompute=full"])["layer"]
    fwd = ("qkv.ag", "proj.rs", "fc1.ag", "fc2.rs", "cp.kv_ring")
    assert full == Counter({**{n: 2 for n in fwd}, "qkv.bwd.rs": 1, "proj.bwd.ag": 1, "fc1.bwd.rs": 1,
                            "fc2.bwd.ag": 1, "cp.kv_ring.bwd": 1})
    listing = per_iteration([*DENSE, "parallelism.recompute=full"])[0]
    act = 4096 * 4096 * 2.0
    assert listing[("qkv.ag", "all_gather", "tp", 2, act)] == 2 * 16 * 4
    assert listing[("qkv.bwd.rs", "reduce_scatter", "tp", 2, act)] == 16 * 4
