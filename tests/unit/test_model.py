"""Parameter and FLOP counts against published figures."""
import pytest

from tests.sampling import fast_every
from vtrain.config.build import model_spec
from vtrain.config.compose import compose
from vtrain.workload.model import megatron_flops_per_iteration


def spec(name):
    return model_spec(compose([f"+model={name}", "+cluster=a100x1024"]).model)


def test_gpt3_175b_parameters():
    # Brown et al. 2020: 175B; the exact count of the 96x12288 shape with 50257 vocab is 174.6B
    assert spec("gpt175b").total_params() == pytest.approx(174.6e9, rel=2e-3)


@pytest.mark.parametrize("name,published_b", fast_every(4, [("mtnlg530b", 530), ("gpt_3_6b", 3.6), ("gpt_18_4b", 18.4),
                                              ("gpt_39_1b", 39.1), ("gpt1t", 1008), ("llama2_7b", 6.74),
                                              ("llama2_70b", 68.98), ("llama3_8b", 8.03), ("llama3_70b", 70.55),
                                              ("llama3_405b", 405.8),
                                              # BLOOM paper / Hugging Face configs: 176,247M and 7,069M
                                              ("bloom_176b", 176.247), ("bloom_7b1", 7.069),
                                              # Llama 2 13B's release 13,016M; LLaMA's Table 2 65.2B; Nemotron-4 15B
                                              # (12.5B non-embedding + 3.2B embedding)
                                              ("llama2_13b", 13.016), ("llama_65b", 65.2), ("nemotron4_15b", 15.7)]))
def test_published_parameter_counts(name, published_b):
    """To one unit of the figure's last published digit (exact counts: tests/unit/test_param_counts.py)."""
    unit = 10.0 ** -len(repr(published_b).partition(".")[2]) if isinstance(published_b, float) else 1.0
    assert abs(spec(name).total_params() / 1e9 - published_b) <= unit


@pytest.mark.parametrize("name", ["gpt175b", "gpt_3_6b", "mtnlg530b"])
def test_flops_match_megatron_formula(name):
    m = spec(name)
    b, s = 1536, 2048
    ours = m.hardware_flops_per_iteration(b, s, "full")
    theirs = megatron_flops_per_iteration(b, s, m.num_layers, m.hidden_size, m.vocab_size, recompute=True)
    # the formula drops the small terms (biases, norms); GEMM FLOPs agree to < 0.5%
    assert ours == pytest.approx(theirs, rel=5e-3)
    assert m.model_flops_per_iteration(b, s) == pytest.approx(
        megatron_flops_per_iteration(b, s, m.num_layers, m.hidden_size, m.vocab_size, recompute=False), rel=5e-3)


def test_gqa_reduces_kv_projection():
    llama = spec("llama2_70b")
    assert llama.kv_size == 8 * 128
    assert llama.attention_params() == 8192 * (8192 + 2 * 1024) + 8192 * 8192


@pytest.mark.parametrize("size,layers,hidden", [("125m", 12, 768), ("1b", 24, 2048), ("7b", 32, 4096),
                                                ("30b", 48, 7168), ("70b", 80, 8192)])
def test_mpt_configs_count_their_parameters(size, layers, hidden):
    """llm-foundry's MPT benchmark shapes: per layer 12h^2 + 13h (QKV, projection and the 4h GELU MLP with
    biases, two LayerNorms), the tied 50,368-word embedding, 2,048 learned positions and the final norm."""
    expected = layers * (12 * hidden**2 + 13 * hidden) + (50368 + 2048) * hidden + 2 * hidden
    assert spec(f"mpt_{size}").total_params() == pytest.approx(expected, rel=1e-6)


def test_alibi_has_no_position_parameters_and_no_sequence_limit():
    bloom = spec("bloom_176b")
    assert bloom.embedding_params() == bloom.vocab_size * bloom.hidden_size  # no position table
    from vtrain.config.build import build_workload
    from vtrain.errors import ConfigError

    longer = ["+cluster=a100x1024", "training.seq_len=4096", "training.global_batch_size=64"]
    assert build_workload(compose(["+model=bloom_7b1", *longer])).plan.seq_len == 4096  # ALiBi extrapolates
    with pytest.raises(ConfigError, match="seq_len"):  # a learned table of 2048 positions does not
        build_workload(compose(["+model=gpt_1_7b", *longer]))


def test_profiler_model_rotates_only_rope_positions():
    torch = pytest.importorskip("torch")
    from dataclasses import replace

    from vtrain.profiler.model import TransformerLM
    from vtrain.workload.enums import PositionEmbedding

    tiny = spec("tiny")
    x = torch.zeros(1, 8, tiny.hidden_size)
    for pos, rotated in ((PositionEmbedding.ROPE, True), (PositionEmbedding.ALIBI, False),
                         (PositionEmbedding.LEARNED, False)):
        model = TransformerLM(replace(tiny, position_embedding=pos))
        rope_cs, _ = model._tables(8, x)
        assert (rope_cs is not None) == rotated, pos
        assert (model.pos is not None) == (pos == PositionEmbedding.LEARNED)


# The matmul FLOPs Megatron-Core's selective recompute runs again per module (--recompute-modules), for one
# 4,096-token sequence, by hand from the public configs: 2 FLOPs per multiply-add of every GEMM in the module.
def _spec(name):
    return model_spec(compose([f"+model={name}", "+cluster=h100x1024"]).model)


S = 4096


def test_llama3_8b_mlp_recompute():
    """32 dense layers, SwiGLU MLP of 3 GEMMs 4096 x 14336; the other modules hold no matmul."""
    m = _spec("llama3_8b")
    assert m.recomputed_module_flops(S, ["mlp"]) == 32 * 2.0 * S * 3 * 4096 * 14336
    assert m.recomputed_module_flops(S, ["layernorm", "moe_act", "moe", "shared_experts", "mla_up_proj"]) == 0.0


def test_deepseek_v3_recompute_per_module():
    """61 layers (3 dense, 58 MoE), h 7168, dense MLP 18432, 256 experts of 2048 (top 8) + 1 shared expert of 2048,
    router 7168 x 256; MLA up-projections q 1536 -> 128 x (128 + 64) and kv 512 -> 128 x (128 + 128)."""
    m = _spec("deepseek_v3")
    h, moe_layers = 7168, 58
    expert = 3 * h * 2048  # gate, up, down of one 2048-wide expert
    assert m.recomputed_module_flops(S, ["mlp"]) == 3 * 2.0 * S * 3 * h * 18432
    assert m.recomputed_module_flops(S, ["shared_experts"]) == moe_layers * 2.0 * S * expert
    assert m.recomputed_module_flops(S, ["moe"]) == pytest.approx(
        moe_layers * 2.0 * S * (h * 256 + 8 * expert + expert), rel=1e-12)
    # moe covers the shared experts: asked together they are counted once
    assert m.recomputed_module_flops(S, ["moe", "shared_experts"]) == m.recomputed_module_flops(S, ["moe"])
    up = 1536 * 128 * 192 + 512 * 128 * 256
    assert m.recomputed_module_flops(S, ["mla_up_proj"]) == 61 * 2.0 * S * up
    assert m.recomputed_module_flops(S, ["mlp", "mla_up_proj"]) == pytest.approx(
        3 * 2.0 * S * 3 * h * 18432 + 61 * 2.0 * S * up, rel=1e-12)
