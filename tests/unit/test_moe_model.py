"""MoE, MLA and MTP model specs: parameter counts (total and active) and FLOPs against published figures."""
import pytest

from vtrain.config.build import model_spec
from vtrain.config.compose import compose
from vtrain.errors import ConfigError
from vtrain.validation.megatron_flops import megatron_flops_per_iteration


def spec(name):
    return model_spec(compose([f"+model={name}", "+cluster=a100x1024"]).model)


# (config, published total B, published active B, whether the publisher counts the input embedding as active)
PUBLISHED = [
    ("deepseek_v3", 671, 36.7, False),  # README_WEIGHTS.md: 671B main model, 36.7B activated
    ("qwen3_235b_a22b", 235, 22, True),  # Qwen3 report Table 2 / model card
    ("mixtral_8x22b", 141, 39, True),  # mistral.ai/news/mixtral-8x22b
    ("mixtral_8x7b", 46.7, 12.9, True),  # Jiang et al. 2024
    ("gpt_oss_120b", 116.83, 5.13, False),  # OpenAI gpt-oss model card, Table 1
    ("qwen3_30b_a3b", 30.5, 3.3, True),  # model card (3.3B activated)
    ("llama4_maverick", 400, 17, True),  # Meta, Llama 4 release
    ("llama4_scout", 109, 17, True),  # Meta, Llama 4 release (Scout: 109B total, 17B active)
    ("deepseek_v2", 236, 21, False),  # DeepSeek-V2 report (arXiv 2405.04434): 236B total, 21B activated
    ("qwen2_57b_a14b", 57, 14, True),  # Qwen2 report (arXiv 2407.10671), Table 1: 57B, 14B activated
]


@pytest.mark.parametrize("name,total_b,active_b,embedding", PUBLISHED)
def test_published_total_and_active_parameters(name, total_b, active_b, embedding):
    """To one unit of each figure's last published digit (exact totals: tests/unit/test_param_counts.py); Llama 4
    Scout's 109B counts its vision encoder too (about 1.2B here), which the text model leaves out."""
    m = spec(name)

    def unit(x):
        return 10.0 ** -len(repr(x).partition(".")[2]) if isinstance(x, float) else 1.0

    vision_b = 1.3 if name == "llama4_scout" else 0.0
    assert 0.0 <= total_b - m.total_params(mtp=False) / 1e9 + unit(total_b) <= 2 * unit(total_b) + vision_b
    assert abs(m.active_params(embedding=embedding) / 1e9 - active_b) <= unit(active_b)


@pytest.mark.parametrize("name,published_b", [("kimi_k2", 1040), ("qwen3_32b", 32.8), ("llama3_1_405b", 405.8),
                                              ("nemotron4_340b", 341)])
def test_other_published_totals(name, published_b):
    assert spec(name).total_params() / 1e9 == pytest.approx(published_b, rel=0.02)


def test_deepseek_v2_lite_counts():
    """DeepSeek-V2 report, Appendix B: 15.7B total, "2.4B" activated. Counted as for V2 and V3 (output head in,
    input embedding out) it is 2.45B: the publisher's figure is that, cut to one decimal."""
    m = spec("deepseek_v2_lite")
    assert m.total_params(mtp=False) / 1e9 == pytest.approx(15.7, rel=0.01)
    assert 2.4 <= m.active_params(embedding=False) / 1e9 < 2.5


def test_deepseek_v3_mtp_module_and_layer_kinds():
    m = spec("deepseek_v3")
    # README_WEIGHTS.md: the MTP module has 11.5B unique parameters (embedding and head shared)
    assert m.mtp_params() / 1e9 == pytest.approx(11.5, rel=0.02)
    assert [m.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert m.num_moe_layers == 58 and m.mtp_is_moe


def test_llama4_interleaves_moe_layers():
    m = spec("llama4_maverick")
    assert [m.is_moe_layer(i) for i in range(4)] == [False, True, False, True] and m.num_moe_layers == 24


def test_dense_models_unchanged_by_the_moe_fields():
    m = spec("llama3_70b")
    assert m.active_params() == m.total_params() and m.num_moe_layers == 0 and m.mtp_params() == 0


@pytest.mark.parametrize("name", ["deepseek_v3", "qwen3_235b_a22b", "mixtral_8x22b"])
def test_flops_per_token_follow_the_active_matmul_parameters(name):
    """Forward FLOPs per token = 2 x the weights a token multiplies with (plus the attention core and MTP)."""
    m = spec(name)
    s = 4096
    per_token = m.forward_flops_per_sequence(s) / s
    core = m.attention_core_flops(s) / s * (m.num_layers + m.mtp_layers)
    dense = m.num_layers - m.num_moe_layers
    matmul = dense * m.layer_matmul_params() + m.num_moe_layers * m.moe_layer_matmul_params()
    logits = m.hidden_size * m.vocab_size * (1 + m.mtp_layers)
    mtp = m.mtp_layers * (2 * m.hidden_size ** 2 + m.moe_layer_matmul_params())
    assert per_token == pytest.approx(2 * (matmul + logits + mtp) + core, rel=1e-12)
    active_matmul = m.active_params(embedding=False) - (m.num_layers * 2 + 1) * m.norm_params()
    assert 2 * matmul == pytest.approx(2 * (active_matmul - m.hidden_size * m.vocab_size), rel=0.01)


@pytest.mark.parametrize("name", ["deepseek_v3", "qwen3_235b_a22b", "mixtral_8x22b"])
def test_model_flops_match_megatron_count(name):
    """Megatron's count (the basis of Megatron-Core's reported TFLOP/s) halves the causal attention core and
    leaves out the router; ours counts the full core (Narayanan et al. Eq. 3) and the router."""
    m = spec(name)
    b, s = 64, 4096
    ours = m.model_flops_per_iteration(b, s) - 3 * b * (m.num_layers + m.mtp_layers) * m.attention_core_flops(s) / 2
    router = 3 * b * s * 2 * m.hidden_size * m.num_experts * (m.num_moe_layers + m.mtp_layers * m.mtp_is_moe)
    theirs = megatron_flops_per_iteration(m, b, s)
    assert ours - router == pytest.approx(theirs, rel=0.01)


def test_megatron_count_reproduces_published_tflops():
    """The Qwen3-235B H100 table: 245 TFLOP/s/GPU at 19.7 s on 256 GPUs, GBS 2048 x 4096 tokens."""
    f = megatron_flops_per_iteration(spec("qwen3_235b_a22b"), 2048, 4096, tp=2)
    assert f / (19.7 * 256) / 1e12 == pytest.approx(245, rel=0.01)


@pytest.mark.parametrize("override,message", [
    ("model.moe_top_k=300", "model.moe_top_k=300 must be <= num_experts=256"),
    ("model.kv_lora_rank=0", "model.kv_lora_rank=0 must be > 0 with attention=mla"),
    ("model.moe_imbalance=0.5", "model.moe_imbalance=0.5: must be a finite number in [1, 65536]"),
    ("model.first_dense_layers=61", "leaves no MoE layer"),
    ("model.moe_imbalance=1000", "model.moe_imbalance=1000 must be <= num_experts/moe_top_k=256/8"),
    ("model.capacity_factor=1000", "model.capacity_factor=1000 must be <= num_experts/moe_top_k=256/8"),
])
def test_bad_moe_models_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as err:
        model_spec(compose(["+model=deepseek_v3", "+cluster=a100x1024", override]).model)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_capacity_factor_below_one_drops_routed_flops():
    """With capacity c < 1 each expert takes c of its balanced share: the routed experts compute c of the
    top-k work (else MFU counted dropped tokens, and passed 1 at c = 0.01)."""
    from dataclasses import replace

    from vtrain import compose
    from vtrain.api import simulate

    m = spec("mixtral_8x7b")
    full = m.moe_layer_matmul_params()
    half = replace(m, capacity_factor=0.5).moe_layer_matmul_params()
    routed = 3 * m.hidden_size * m.moe_top_k * m.expert_ffn  # gated: gate, up, down
    assert full - half == pytest.approx(0.5 * routed)
    assert replace(m, capacity_factor=1.25).moe_layer_matmul_params() == pytest.approx(full)  # padding is no work
    r = simulate(compose(["+model=mixtral_8x7b", "+cluster=h100x1024", "parallelism.tp=2", "parallelism.pp=4",
                          "parallelism.dp=8", "parallelism.ep=8", "training.global_batch_size=64",
                          "training.seq_len=4096", "model.capacity_factor=0.01"]))
    assert 0 < r.mfu < 1
