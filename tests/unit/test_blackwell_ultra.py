"""Blackwell Ultra (B300, GB300) doubles the SFU's exp rate (MUFU.EX2); fused attention's softmax runs on it. The
configs price it as a serial MMA + exposed-exp model pinned by NVIDIA's reported +35% FP8 attention forward on GB300
over GB200 (gpu/gb300.yaml provenance): bf16 forward 1.21x, backward 1.10x, 1.128x per step at 1 : 2.5 FLOPs."""
import pytest

from vtrain.calibration.gpu_derive import power_limited_rate_ratio
from vtrain.config.build import gpu_spec
from vtrain.config.compose import load_gpu_config

FP8_FORWARD_GAIN = 1.35  # NVIDIA blog "Making Softmax More Efficient with NVIDIA Blackwell Ultra" (2026)


def step_gain(fp8_forward_gain: float) -> float:
    exposed = (fp8_forward_gain - 1) / (1 - fp8_forward_gain / 2)  # exp time / FP8 MMA time: a + b -> a + b / 2
    forward = (2 + exposed) / (2 + exposed / 2)  # bf16 MMA takes twice FP8's
    backward = (5 + exposed) / (5 + exposed / 2)  # 2.5x the forward's MMA, one exp per score again
    return 3.5 / (1 / forward + 2.5 / backward)


def test_the_derivation():
    assert step_gain(FP8_FORWARD_GAIN) == pytest.approx(1.1278, abs=1e-4)
    assert step_gain(1.0) == pytest.approx(1.0)  # no exp exposed: no gain


@pytest.mark.parametrize("gpu", ["b300", "gb300"])
def test_blackwell_ultra_attention_takes_the_sfu_gain(gpu):
    spec = gpu_spec(load_gpu_config(gpu))
    b200 = gpu_spec(load_gpu_config("b200"))
    # B200's measured rate at the power-limited clock law's tensor-core rate (SMs and board power), as a fraction of
    # this part's bf16 peak (vtrain/calibration/gpu_derive.py)
    rate = power_limited_rate_ratio(spec.num_sms, spec.tdp_w, spec.idle_w, b200.num_sms, b200.tdp_w, b200.idle_w)
    same_cores = b200.flash_attention_efficiency * rate * b200.peak_tflops["bf16"] / spec.peak_tflops["bf16"]
    assert spec.flash_attention_efficiency == pytest.approx(same_cores * step_gain(FP8_FORWARD_GAIN), abs=6e-4)
    assert "MUFU.EX2" in spec.provenance["flash_attention_efficiency"]


def test_blackwell_keeps_its_measured_rate():
    gb200 = gpu_spec(load_gpu_config("gb200"))
    assert gb200.flash_attention_efficiency == pytest.approx(0.4064)
    assert "MUFU" not in gb200.provenance["flash_attention_efficiency"]
