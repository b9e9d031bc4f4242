"""The shipped Blackwell k0 (gpu.flash_attention_k0_tokens) is what bench/fit_attention_length.py gives under
today's model: the B200 sequence-length sweep is simulated whole (DeepSpeed ZeRO-3 steps), so a change to any
other kernel of those steps can move the fit, and this fails until ``--write`` has refitted the configs. The
check is local (the shipped k0 against its neighbours on the script's 50-key grid), not the whole grid."""
from tests.bench_scripts import load_bench
from vtrain.config.compose import load_gpu_config


def _fit_module():
    return load_bench("fit_attention_length")


def test_shipped_blackwell_k0_is_the_fit_of_the_current_model():
    fit = _fit_module()
    rows = [r for r in fit.read_rows() if r.gpu == "b200"]
    measured = [r.measured_s for r in rows]

    def sse(k0: float) -> float:
        pred = [fit.predicted_s(r.gpu, r.seq_len, k0) for r in rows]
        c = fit.offload_s(measured, pred)
        return sum(((c + p) / m - 1.0) ** 2 for p, m in zip(pred, measured))

    shipped = float(load_gpu_config("b200").flash_attention_k0_tokens)
    step = fit.K0_GRID[1] - fit.K0_GRID[0]
    here, below, above = sse(shipped), sse(shipped - step), sse(shipped + step)
    assert here <= below and here <= above, (
        f"gpu/b200.yaml ships flash_attention_k0_tokens={shipped:.0f}, but a neighbour fits better "
        f"(sse {below:.5f} / {here:.5f} / {above:.5f}): refit with python bench/fit_attention_length.py --write")
    for part in ("b300", "gb200", "gb300"):  # the transfers carry it
        assert float(load_gpu_config(part).flash_attention_k0_tokens) == shipped, part
