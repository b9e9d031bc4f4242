"""The matmul FLOPs Megatron-Core's selective recompute runs again per module (``--recompute-modules``), for one
4,096-token sequence, written by hand from the public configs: 2 FLOPs per multiply-add of every GEMM in the
module's forward (ModelSpec.recomputed_module_flops)."""
import pytest

from vtrain import compose
from vtrain.config.build import model_spec

S = 4096


def spec(name):
    return model_spec(compose([f"+model={name}", "+cluster=h100x1024"]).model)


def test_llama3_8b_mlp_recompute():
    """32 dense layers, SwiGLU MLP of 3 GEMMs 4096 x 14336; the other modules hold no matmul."""
    m = spec("llama3_8b")
    assert m.recomputed_module_flops(S, ["mlp"]) == 32 * 2.0 * S * 3 * 4096 * 14336
    assert m.recomputed_module_flops(S, ["layernorm", "moe_act", "moe", "shared_experts", "mla_up_proj"]) == 0.0


def test_deepseek_v3_recompute_per_module():
    """61 layers (3 dense, 58 MoE), h 7168, dense MLP 18432, 256 experts of 2048 (top 8) + 1 shared expert of 2048,
    router 7168 x 256; MLA up-projections q 1536 -> 128 x (128 + 64) and kv 512 -> 128 x (128 + 128)."""
    m = spec("deepseek_v3")
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
