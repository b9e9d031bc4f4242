"""The power-limited clock law of vtrain/calibration/gpu_derive.py and the Blackwell transfers it can replace."""
from __future__ import annotations

import pytest

from vtrain.calibration.gemm_tables import GemmParams, read_mamf
from vtrain.calibration.gpu_derive import TRANSFERS, by_power, derive, power_limited_rate_ratio, read_flash_tflops
from vtrain.config.build import gpu_spec
from vtrain.config.compose import load_gpu_config


def _spec(name):
    return gpu_spec(load_gpu_config(name))


def _law(name, source="b200"):
    g, s = _spec(name), _spec(source)
    return power_limited_rate_ratio(g.num_sms, g.tdp_w, g.idle_w, s.num_sms, s.tdp_w, s.idle_w)


def _derived(gpu, power_law=False):
    """derive() of ``gpu`` from B200's shipped curve (gpu/b200.yaml), as bench/fit_gemm.py would write it."""
    b = _spec("b200")
    fitted = {"B200": {p: GemmParams(b.gemm_efficiency_by_precision[p], b.gemm_half_efficiency_dim,
                                     b.gemm_half_efficiency_k, b.gemm_fixed_time_s, b.gemm_wave_exponent)
                       for p in ("bf16", "fp8")}}
    tr = next(t for t in TRANSFERS if t.gpu == gpu)
    tr = by_power(tr) if power_law else tr
    power = (_law(gpu), dict(b.peak_tflops)) if tr.by_power else None
    return derive(tr, fitted, read_mamf(), _spec(gpu).peak_tflops, read_flash_tflops(), {"B200": 2250.0},
                  "2026-12", {"B200": "b"}, None, power)


def test_the_law_is_the_power_cap_clock_of_one_part_and_adds_the_sm_count():
    # the H100 at 500 W: the same SMs, so the law is gpu.power_clock_fraction's ((500 - 70) / (700 - 70))^(1/3)
    assert power_limited_rate_ratio(132, 500.0, 70.0, 132, 700.0, 70.0) == pytest.approx(
        _spec("h100_96gb_500w").power_clock_fraction, abs=5e-4)
    # at one power, more SMs run at a lower clock: rate ~ SMs^(2/3)
    assert power_limited_rate_ratio(160, 1000.0, 100.0, 148, 1000.0, 100.0) == pytest.approx((160 / 148) ** (2 / 3))
    assert _law("b300") == pytest.approx(1.0874, abs=1e-4)  # 160 SMs at 1,100 W over 148 at 1,000 W
    assert _law("gb300") == pytest.approx(1.1784, abs=1e-4)  # 160 SMs at 1,400 W


def test_the_law_reads_gb200s_own_best_matmul_within_2_percent():
    mamf = read_mamf()
    for p in ("bf16", "fp8"):
        measured = mamf[("NVIDIA GB200 SXM", p)].tflops / mamf[("NVIDIA B200 SXM", p)].tflops
        assert measured == pytest.approx(_law("gb200"), rel=0.02)  # 1.044, 1.053 against 1.063
    # B300's one point is not: it reads B300 below B200 in fp8 (the law: +8.7%)
    assert mamf[("NVIDIA B300 SXM", "fp8")].tflops < mamf[("NVIDIA B200 SXM", "fp8")].tflops


def test_a_power_transfer_moves_the_sources_rate_by_the_law_and_the_peaks():
    b = _spec("b200")
    values, prov = _derived("gb300", power_law=True)
    law = _law("gb300")
    eta = values["gemm_efficiency_by_precision"]
    assert eta["fp8"] == pytest.approx(round(b.gemm_efficiency_by_precision["fp8"] * law * 4500 / 5000, 4))
    assert eta["bf16"] == pytest.approx(round(b.gemm_efficiency_by_precision["bf16"] * law * 2250 / 2500, 4))
    assert eta["nvfp4"] == eta["mxfp8"] == eta["fp8"]  # copied: the same fraction of each format's own peak
    ceiling = values["gemm_ceiling_by_precision"]
    assert ceiling["fp8"] == pytest.approx(round(read_mamf()[("NVIDIA B200 SXM", "fp8")].tflops * law / 5000, 3))
    assert "power-limited clock law" in prov["gemm_efficiency_by_precision"]
    # attention: B200's, at the law's rate and GB300's bf16 peak, x the doubled SFU exp rate
    assert values["flash_attention_efficiency"] == pytest.approx(
        _spec("b200").flash_attention_efficiency * law * 2250 / 2500 * 1.128, abs=2e-4)


def test_the_shipped_blackwell_configs_are_what_the_transfers_write():
    # B300 and GB300 by the power law (eta, best-matmul ceiling, attention with the SFU factor), GB200 by its MAMF
    for gpu in ("b300", "gb300", "gb200"):
        values, prov = _derived(gpu)
        g = _spec(gpu)
        assert values["gemm_efficiency_by_precision"] == pytest.approx(g.gemm_efficiency_by_precision, abs=2e-4)
        assert values["flash_attention_efficiency"] == pytest.approx(g.flash_attention_efficiency, abs=2e-4)
        if gpu != "gb200":
            assert values["gemm_ceiling_by_precision"] == pytest.approx(g.gemm_ceiling_by_precision, abs=1e-3)
            assert "x 1.128" in prov["flash_attention_efficiency"]
            assert "power-limited clock law" in prov["gemm_efficiency_by_precision"]


def test_a_power_transfer_needs_the_law():
    tr = by_power(next(t for t in TRANSFERS if t.gpu == "gb300"))
    with pytest.raises(ValueError, match="power law"):
        derive(tr, {"B200": {"bf16": GemmParams(0.8, 20.0, 250.0, 5e-6, 0.5)}}, read_mamf(), _spec("gb300").peak_tflops,
               read_flash_tflops(), {"B200": 2250.0}, "2026-12", {"B200": "b"})
