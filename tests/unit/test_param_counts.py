"""Parameter counts EXACT for every shipped ``conf/model/*.yaml``, against its public configuration.

The expected counts are written here by hand, independently of ``vtrain.workload.model``: for released
checkpoints from the numbers of their Hugging Face ``config.json`` and the tensors their ``modeling_*.py``
creates (one line per tensor kind), and, where the publisher states an exact total (the Hub's safetensors
parameter count), that total too. GPT shapes without a checkpoint (GPT-3, the Megatron GPT family, MT-NLG,
llm-foundry's MPT benchmark shapes) follow Narayanan et al. (SC'21) Sec. 5.1's closed form
P = 12 l h^2 + 13 l h + (V + s) h, plus the final LayerNorm's 2h the closed form leaves out.
A missing bias, norm or expert changes a count by at least h parameters: every assertion is exact (==).
Hub totals count the real vocabulary, so Megatron's vocabulary padding is switched off (vocab_divisible_by=0).
"""
import functools
from dataclasses import replace

import pytest

from tests.sampling import fast_every
from vtrain.config.build import model_spec
from vtrain.config.compose import compose


@functools.lru_cache(maxsize=None)  # ModelSpec is frozen: one composition per model for the whole file
def spec(name):
    m = model_spec(compose([f"+model={name}", "+cluster=a100x1024"]).model)
    return replace(m, vocab_divisible_by=0)


def gpt_closed_form(layers, h, v, s):  # Narayanan et al. SC'21 Sec. 5.1, + the final LayerNorm (2h)
    return 12 * layers * h * h + 13 * layers * h + (v + s) * h + 2 * h


# name: (layers, hidden, vocab as the config states it, learned positions)
GPT_SHAPES = {
    "gpt175b": (96, 12288, 50257, 2048),  # Brown et al. 2020, Table 2.1
    "gpt_1_7b": (24, 2304, 51200, 2048), "gpt_3_6b": (30, 3072, 51200, 2048),
    "gpt_7_5b": (36, 4096, 51200, 2048), "gpt_18_4b": (40, 6144, 51200, 2048),
    "gpt_39_1b": (48, 8192, 51200, 2048), "gpt_76_1b": (60, 10240, 51200, 2048),
    "gpt_145_6b": (80, 12288, 51200, 2048), "gpt_310_1b": (96, 16384, 51200, 2048),
    "gpt1t": (128, 25600, 51200, 2048),
    "mtnlg530b": (105, 20480, 51200, 2048),  # Smith et al. 2022, Sec. 2.3
    "tiny": (2, 128, 1000, 128),
    # llm-foundry scripts/train/benchmarking (MPT): 50,368-word tied embedding, 2,048 learned positions
    "mpt_125m": (12, 768, 50368, 2048), "mpt_350m": (24, 1024, 50368, 2048), "mpt_760m": (24, 1536, 50368, 2048),
    "mpt_1b": (24, 2048, 50368, 2048), "mpt_3b": (32, 2560, 50368, 2048), "mpt_7b": (32, 4096, 50368, 2048),
    "mpt_13b": (40, 5120, 50368, 2048), "mpt_30b": (48, 7168, 50368, 2048), "mpt_70b": (80, 8192, 50368, 2048),
}


@pytest.mark.parametrize("name", fast_every(2, sorted(GPT_SHAPES)))
def test_gpt_shapes_count_exactly_the_closed_form(name):
    assert spec(name).total_params() == gpt_closed_form(*GPT_SHAPES[name])


def test_gpt3_175b_exact_and_near_the_paper():
    n = spec("gpt175b").total_params()
    assert n == 174_604_259_328  # 12*96*12288^2 + 13*96*12288 + (50257+2048)*12288 + 2*12288
    assert n == pytest.approx(175e9, rel=0.003)  # the paper's "175B", rounded


def llama_like(layers, h, heads, kv_heads, ffn, vocab, head_dim=0, qk_norm=False, tied=False):
    """LlamaForCausalLM / Qwen3ForCausalLM (modeling_llama.py, modeling_qwen3.py): q/k/v/o without bias,
    gate/up/down, input and post-attention RMSNorm (h each), Qwen3's q_norm and k_norm (head_dim each),
    the final norm, embed_tokens and lm_head."""
    d = head_dim or h // heads
    attn = h * heads * d + 2 * h * kv_heads * d + heads * d * h + (2 * d if qk_norm else 0)
    layer = attn + 3 * h * ffn + 2 * h
    return layers * layer + vocab * h * (1 if tied else 2) + h


# name: (hand count from config.json, the Hub's exact safetensors total or None, source)
DENSE_HF = {
    "llama2_7b": (llama_like(32, 4096, 32, 32, 11008, 32000), 6_738_415_616),  # meta-llama/Llama-2-7b-hf
    "llama2_13b": (llama_like(40, 5120, 40, 40, 13824, 32000), 13_015_864_320),  # meta-llama/Llama-2-13b-hf
    "llama2_70b": (llama_like(80, 8192, 64, 8, 28672, 32000), 68_976_648_192),  # meta-llama/Llama-2-70b-hf
    "llama_65b": (llama_like(80, 8192, 64, 64, 22016, 32000), 65_285_660_672),  # huggyllama/llama-65b
    "llama3_8b": (llama_like(32, 4096, 32, 8, 14336, 128256), 8_030_261_248),  # meta-llama/Meta-Llama-3-8B
    "llama3_70b": (llama_like(80, 8192, 64, 8, 28672, 128256), 70_553_706_496),  # meta-llama/Meta-Llama-3-70B
    "llama3_405b": (llama_like(126, 16384, 128, 8, 53248, 128256), 405_853_388_800),  # meta-llama/Llama-3.1-405B
    "llama3_1_405b": (llama_like(126, 16384, 128, 8, 53248, 128256), 405_853_388_800),
    "qwen3_8b": (llama_like(36, 4096, 32, 8, 12288, 151936, 128, qk_norm=True), 8_190_735_360),  # Qwen/Qwen3-8B
    "qwen3_32b": (llama_like(64, 5120, 64, 8, 25600, 151936, 128, qk_norm=True), 32_762_123_264),  # Qwen/Qwen3-32B
}


@pytest.mark.parametrize("name", fast_every(2, sorted(DENSE_HF)))
def test_dense_hf_models_count_exactly(name):
    hand, hub = DENSE_HF[name]
    if hub is not None:
        assert hand == hub  # the hand count of config.json reproduces the Hub's total
    assert spec(name).total_params() == hand


def test_a_missing_norm_or_bias_changes_the_count():
    """The guard is exact: Qwen3's per-head q/k norms (2 x 128 per layer) alone move the count."""
    m = spec("qwen3_8b")
    assert replace(m, qk_norm=False).total_params() == DENSE_HF["qwen3_8b"][0] - 36 * 2 * 128
    gpt = spec("gpt_1_7b")
    assert replace(gpt, use_bias=False).total_params() == gpt_closed_form(*GPT_SHAPES["gpt_1_7b"]) - 24 * 9 * 2304


def bloom(layers, h, vocab):
    """BloomForCausalLM (modeling_bloom.py): word_embeddings + word_embeddings_layernorm (2h), per layer
    query_key_value (3h^2 + 3h), dense (h^2 + h), dense_h_to_4h and dense_4h_to_h (8h^2 + 5h), two LayerNorms
    (4h); ln_f (2h); lm_head tied; ALiBi (no position table)."""
    return vocab * h + 2 * h + layers * (12 * h * h + 13 * h) + 2 * h


@pytest.mark.parametrize("name,hand,hub", [("bloom_176b", bloom(70, 14336, 250880), 176_247_271_424),
                                           ("bloom_7b1", bloom(30, 4096, 250880), 7_069_016_064)])
@pytest.mark.xfail(strict=True, reason="vtrain does not count BLOOM's word_embeddings_layernorm (2h)")
def test_bloom_counts_exactly(name, hand, hub):
    assert hand == hub
    assert spec(name).total_params() == hand


@pytest.mark.parametrize("name,hand", [("bloom_176b", bloom(70, 14336, 250880)),
                                       ("bloom_7b1", bloom(30, 4096, 250880))])
def test_bloom_counts_all_but_the_embedding_norm(name, hand):
    h = spec(name).hidden_size
    assert spec(name).total_params() == hand - 2 * h


def nemotron4(layers, h, heads, kv_heads, ffn, vocab):
    """NemotronForCausalLM (modeling_nemotron.py, nvidia/Nemotron-4-340B config): q/k/v/o without bias,
    squared-ReLU MLP (up_proj, down_proj), LayerNorm1P with weight and bias (2h) twice per layer and once
    at the end, untied embedding and head."""
    d = h // heads
    attn = h * heads * d + 2 * h * kv_heads * d + heads * d * h
    return layers * (attn + 2 * h * ffn + 4 * h) + 2 * vocab * h + 2 * h


@pytest.mark.parametrize("name,hand", [("nemotron4_15b", nemotron4(32, 6144, 48, 8, 24576, 256000)),
                                       ("nemotron4_340b", nemotron4(96, 18432, 96, 8, 73728, 256000))])
def test_nemotron4_counts_exactly(name, hand):
    assert spec(name).total_params() == hand


def moe_gqa(layers, h, heads, kv_heads, d, ffn_expert, experts, vocab, qk_norm=False, moe_every=1,
            dense_ffn=0, shared_ffn=0):
    """MixtralForCausalLM / Qwen3MoeForCausalLM / Llama4ForCausalLM (text): GQA attention without bias (Qwen3:
    q_norm, k_norm), per MoE layer a router h x E without bias, E SwiGLU experts, the shared expert (Llama 4),
    dense layers between MoE ones (Llama 4 Maverick's interleave_moe_layer_step=2: intermediate_size_mlp),
    two RMSNorms per layer, the final norm, untied embedding and head."""
    attn = h * heads * d + 2 * h * kv_heads * d + heads * d * h + (2 * d if qk_norm else 0)
    moe = h * experts + experts * 3 * h * ffn_expert + 3 * h * shared_ffn
    n_moe = layers // moe_every
    return layers * (attn + 2 * h) + n_moe * moe + (layers - n_moe) * 3 * h * dense_ffn + 2 * vocab * h + h


# name: (hand count, the Hub's exact total or None, the publisher's rounded total in B)
MOE_HF = {
    "mixtral_8x7b": (moe_gqa(32, 4096, 32, 8, 128, 14336, 8, 32000), 46_702_792_704, 46.7),
    "mixtral_8x22b": (moe_gqa(56, 6144, 48, 8, 128, 16384, 8, 32768), None, 141),  # Instruct-v0.1 vocabulary
    "qwen3_30b_a3b": (moe_gqa(48, 2048, 32, 4, 128, 768, 128, 151936, qk_norm=True), 30_532_122_624, 30.5),
    "qwen3_235b_a22b": (moe_gqa(94, 4096, 64, 4, 128, 1536, 128, 151936, qk_norm=True), 235_093_634_560, 235),
}


@pytest.mark.parametrize("name", fast_every(2, sorted(MOE_HF)))
def test_moe_hf_models_count_exactly(name):
    hand, hub, rounded_b = MOE_HF[name]
    if hub is not None:
        assert hand == hub
    assert hand / 1e9 == pytest.approx(rounded_b, abs=0.51)  # the publisher's figure, as rounded
    assert spec(name).total_params(mtp=False) == hand


LLAMA4 = {  # meta-llama/Llama-4-{Scout-17B-16E, Maverick-17B-128E} text_config
    "llama4_scout": moe_gqa(48, 5120, 40, 8, 128, 8192, 16, 202048, shared_ffn=8192),
    "llama4_maverick": moe_gqa(48, 5120, 40, 8, 128, 8192, 128, 202048, moe_every=2, dense_ffn=16384,
                               shared_ffn=8192),
}


@pytest.mark.parametrize("name", fast_every(2, sorted(LLAMA4)))
@pytest.mark.xfail(strict=True, reason="vtrain gives every sigmoid router a score bias (DeepSeek's "
                   "e_score_correction_bias); Llama 4's router (nn.Linear(h, E, bias=False)) has none")
def test_llama4_counts_exactly(name):
    assert spec(name).total_params() == LLAMA4[name]


@pytest.mark.parametrize("name", fast_every(2, sorted(LLAMA4)))
def test_llama4_counts_all_but_a_router_bias(name):
    m = spec(name)
    assert m.total_params() == LLAMA4[name] + m.num_moe_layers * m.num_experts


def qwen2_moe(layers, h, heads, kv_heads, d, ffn_expert, experts, shared_ffn, vocab):
    """Qwen2MoeForCausalLM (modeling_qwen2_moe.py): q/k/v WITH bias, o without; router h x E; E SwiGLU
    experts; one shared expert of width shared_expert_intermediate_size and its sigmoid gate (h x 1)."""
    attn = h * heads * d + heads * d + 2 * (h * kv_heads * d + kv_heads * d) + heads * d * h
    moe = h * experts + experts * 3 * h * ffn_expert + 3 * h * shared_ffn + h
    return layers * (attn + moe + 2 * h) + 2 * vocab * h + h


QWEN2_57B = qwen2_moe(28, 3584, 28, 4, 128, 2560, 64, 20480, 151936)  # Qwen/Qwen2-57B-A14B config.json


@pytest.mark.xfail(strict=True, reason="vtrain's use_bias is all or nothing: Qwen2's q/k/v biases and the "
                   "shared expert's gate (h x 1) are not counted")
def test_qwen2_57b_counts_exactly():
    assert spec("qwen2_57b_a14b").total_params() == QWEN2_57B


def test_qwen2_57b_counts_all_but_the_qkv_bias_and_shared_gate():
    per_layer = 28 * 128 + 2 * 4 * 128 + 3584
    assert spec("qwen2_57b_a14b").total_params() == QWEN2_57B - 28 * per_layer
    assert QWEN2_57B / 1e9 == pytest.approx(57, abs=0.5)  # Qwen2 report, Table 1: 57B


def deepseek_mla(layers, h, heads, q_rank, kv_rank, d_nope, d_rope, d_v, dense_ffn, first_dense, experts,
                 expert_ffn, shared, vocab, score_bias):
    """DeepseekV2/V3ForCausalLM (modeling_deepseek.py): q_a_proj, q_a_layernorm, q_b_proj (or q_proj without
    q_lora_rank), kv_a_proj_with_mqa (kv_rank + d_rope), kv_a_layernorm, kv_b_proj, o_proj; MoE: gate weight
    (E x h) and, with noaux_tc, e_score_correction_bias (E), E routed and the shared experts (n x expert width);
    two RMSNorms per layer; final norm; untied embedding and head. MTP modules excluded (main model)."""
    qk = d_nope + d_rope
    q = (h * q_rank + q_rank + q_rank * heads * qk) if q_rank else h * heads * qk
    attn = q + h * (kv_rank + d_rope) + kv_rank + kv_rank * heads * (d_nope + d_v) + heads * d_v * h
    moe = h * experts + (experts if score_bias else 0) + (experts + shared) * 3 * h * expert_ffn
    return layers * (attn + 2 * h) + first_dense * 3 * h * dense_ffn + (layers - first_dense) * moe \
        + 2 * vocab * h + h


MLA = {  # config.json of deepseek-ai/DeepSeek-V3, DeepSeek-V2, DeepSeek-V2-Lite, moonshotai/Kimi-K2-Base
    "deepseek_v3": (deepseek_mla(61, 7168, 128, 1536, 512, 128, 64, 128, 18432, 3, 256, 2048, 1, 129280, True), 671),
    "deepseek_v2": (deepseek_mla(60, 5120, 128, 1536, 512, 128, 64, 128, 12288, 1, 160, 1536, 2, 102400, False), 236),
    "deepseek_v2_lite": (deepseek_mla(27, 2048, 16, 0, 512, 128, 64, 128, 10944, 1, 64, 1408, 2, 102400, False),
                         15.7),
    "kimi_k2": (deepseek_mla(61, 7168, 64, 1536, 512, 128, 64, 128, 18432, 1, 384, 2048, 1, 163840, True), 0),
}


def test_kimi_k2_is_the_published_one_trillion():
    assert round(MLA["kimi_k2"][0] / 1e12, 1) == 1.0  # model card: "1T total parameters" (1.026e12 counted)


@pytest.mark.parametrize("name", fast_every(2, sorted(MLA)))
def test_mla_models_count_exactly(name):
    hand, published_b = MLA[name]
    if published_b:
        assert hand / 1e9 == pytest.approx(published_b, rel=0.005)  # the publisher's rounded total
    assert spec(name).total_params(mtp=False) == hand


def test_deepseek_v3_mtp_module_counts_exactly():
    """One MTP module (modeling in DeepSeek-V3's inference/model.py, README_WEIGHTS.md): enorm, hnorm, eh_proj
    (2h x h), one MoE layer and shared_head.norm; embedding and head shared: README_WEIGHTS.md's "11.5B unique
    parameters" (the count is 11.61B: the README's figure is within 1%)."""
    h = 7168
    layer = (deepseek_mla(1, h, 128, 1536, 512, 128, 64, 128, 18432, 0, 256, 2048, 1, 0, True) - h)
    mtp = 3 * h + 2 * h * h + layer
    assert spec("deepseek_v3").mtp_params() == mtp
    assert mtp / 1e9 == pytest.approx(11.5, rel=0.01)


def gpt_oss(layers, h, heads, kv_heads, d, experts, ffn, vocab):
    """GptOssForCausalLM (modeling_gpt_oss.py): q/k/v/o with bias, per-head attention sinks, router h x E with
    bias, E experts with gate_up_proj (h x 2f) + bias, down_proj (f x h) + bias, two RMSNorms; untied."""
    attn = h * heads * d + heads * d + 2 * (h * kv_heads * d + kv_heads * d) + heads * d * h + h
    moe = h * experts + experts + experts * (3 * h * ffn + 2 * ffn + h)
    return layers * (attn + heads + moe + 2 * h) + 2 * vocab * h + h


GPT_OSS_120B = gpt_oss(36, 2880, 64, 8, 64, 128, 2880, 201088)  # openai/gpt-oss-120b config.json


def test_gpt_oss_counts_exactly():
    """The sinks (model.attention_sinks: one learned logit per query head and layer, 36 x 64) included."""
    assert spec("gpt_oss_120b").total_params() == GPT_OSS_120B
    assert GPT_OSS_120B / 1e9 == pytest.approx(116.83, abs=0.005)  # model card, Table 1
