"""End to end on CPU with real torch timings: profile the tiny model, predict its training iteration
from that profile, measure it with task=measure, and check the error bound.

Bound: |predicted / measured - 1| <= 35 %. Observed on the 2-core shared VM this was written on
(torch 2.13 CPU, 1 thread, CPU-time clock), tiny GPT: mb=2 flash (interpolated between profiled
micro-batches 1 and 4) -8 % to -17 %, mb=4 unfused -14 % to -21 % (also with two CPU hogs running);
the prediction is low because the op profile misses framework glue between ops (autograd engine,
gradient accumulation, module calls, head split/merge views). Iteration spread (p90-p10)/median
2-20 %, op-profile spread 3-10 %. A Llama-style tiny model reads -22 % to -31 %: only its code path
is tested here, not the bound.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # real torch profiling and training steps (seconds each)

from vtrain.cost.profile_io import read_profile  # noqa: E402

BOUND = 0.35
TINY = ["+model=tiny", "profile.device=cpu", "training.seq_len=128"]


def vtrain(args: list[str], run_dir: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "vtrain", *args, f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Micro-batches 1 and 4 are measured; the tests predict 2 (interpolated) and 4 (measured shape)."""
    root = tmp_path_factory.mktemp("profiles")
    out = root / "cpu-test"
    proc = vtrain(["task=profile", *TINY, f"profile.out_dir={out}", "profile.micro_batch_sizes=[1,4]",
                   "profile.seq_lens=[128]", "profile.repeats=7"], root / "run")
    assert "wrote" in proc.stdout
    return out


def test_profile_schema_and_keys(tiny_profile: Path) -> None:
    table = read_profile(tiny_profile)
    meta = table.meta.raw
    assert table.meta.device == "cpu" and table.meta.gpu == "cpu" and table.meta.dtype == "fp32"
    assert meta["torch_version"] == torch.__version__ and meta["sweep"]["micro_batch_sizes"] == [1, 4]
    assert meta["timing"]["clock"] == "cpu" and table.meta.host_included
    names = {s.op for s in table.ops}
    for op in ("qkv", "qkv.dgrad", "qkv.wgrad", "flash_attn", "flash_attn.bwd", "attn.qk", "attn.softmax",
               "attn.softmax.bwd", "attn.dropout", "attn.av", "norm1", "norm1.bwd", "gelu", "gelu.bwd", "residual1",
               "embedding.lookup", "embedding.grad", "logits", "cross_entropy", "cross_entropy.bwd", "adam"):
        assert op in names, op
    keys = [(s.op, s.variant, s.dtype, tuple(sorted(s.shape.items())), s.m, s.n, s.k, s.batch, s.bytes, s.params)
            for s in table.ops]
    assert len(keys) == len(set(keys))  # every row has its own key: no cache-key collisions
    for s in table.ops:
        assert s.median_s > 0 and s.p10_s <= s.median_s <= s.p90_s and s.samples >= 7
    qkv = sorted(s.median_s for s in table.ops if s.op == "qkv")
    assert len(qkv) == 2 and qkv[0] < qkv[1]  # micro-batch 4 takes longer than 1


@pytest.mark.parametrize("micro_batch,flash", [(2, True), (4, False)])
def test_predict_then_measure_within_bound(tiny_profile: Path, tmp_path: Path, micro_batch: int, flash: bool) -> None:
    vtrain(["task=measure", *TINY, f"parallelism.micro_batch_size={micro_batch}",
            f"training.flash_attention={str(flash).lower()}", f"cost.profile_dir={tiny_profile}",
            "profile.measure_iterations=7", f"profile.validation_csv={tmp_path}/validation.csv"], tmp_path / "run")
    result = json.loads((tmp_path / "run" / "measure.json").read_text())
    assert result["extrapolated_ops"] == []  # micro-batch 2 is interpolated between 1 and 4, not extrapolated
    assert result["microbatches"] == 2 and result["params"] > 500_000
    err = result["predicted_s"] / result["measured_s"] - 1
    print(f"tiny mb={micro_batch} flash={flash}: predicted {result['predicted_s'] * 1e3:.1f} ms, measured "
          f"{result['measured_s'] * 1e3:.1f} ms (p10 {result['measured_p10_s'] * 1e3:.1f}, p90 "
          f"{result['measured_p90_s'] * 1e3:.1f}), error {err:+.1%}")
    assert abs(err) <= BOUND, result
    assert (tmp_path / "validation.csv").read_text().count("\n") == 2


def test_prediction_grows_with_micro_batch(tiny_profile: Path) -> None:
    from vtrain.api import simulate
    from vtrain.cli.task_measure import single_device
    from vtrain.config.compose import compose

    times = []
    for mb in (1, 2, 4):
        cfg = compose(["+model=tiny", "+cluster=local_cpu", "training.seq_len=128",
                       f"parallelism.micro_batch_size={mb}", f"cost.profile_dir={tiny_profile}"])
        single_device(cfg, "fp32", 2)
        report = simulate(cfg, profile=read_profile(tiny_profile))
        assert report.extrapolated_ops == () and report.cost_model == "profile"
        times.append(report.iteration_time_s)
    assert times[0] < times[1] < times[2]


def test_profile_cli_errors(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    proc = subprocess.run([sys.executable, "-m", "vtrain", "task=profile", "+model=tiny", "profile.device=cuda",
                           f"hydra.run.dir={tmp_path}/run"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no CUDA device is visible" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_collectives_skip_without_gpus() -> None:
    from vtrain.profiler.collectives import profile_collectives

    if torch.cuda.device_count() >= 2:
        pytest.skip(">= 2 GPUs visible")
    rows, msg = profile_collectives(max_mib=1)
    assert rows == [] and "skipped" in msg and "needs >= 2" in msg


LLAMA = ["+model=tiny", "model.norm=rmsnorm", "model.gated_mlp=true", "model.position_embedding=rope",
         "model.use_bias=false", "model.num_kv_heads=2", "model.dropout=0", "model.tied_embeddings=false",
         "model.ffn_hidden_size=384"]


def test_llama_variant_profile_and_training_step(tmp_path: Path) -> None:
    """RMSNorm, SwiGLU, RoPE, GQA, no bias, untied output; tp shards 1 and 2; both attention paths."""
    from vtrain.api import simulate
    from vtrain.cli.task_measure import single_device
    from vtrain.config.build import model_spec
    from vtrain.config.compose import compose
    from vtrain.profiler.device import torch_device
    from vtrain.profiler.model import measure_training

    out = tmp_path / "llama"
    vtrain(["task=profile", *LLAMA, "profile.device=cpu", "training.seq_len=64", f"profile.out_dir={out}",
            "profile.micro_batch_sizes=[1]", "profile.seq_lens=[64]", "profile.tp_shards=[1,2]",
            "profile.repeats=3", "profile.min_sample_s=0", "profile.adam_layers=[2]"], tmp_path / "run")
    table = read_profile(out)
    variants = {(s.op, s.variant) for s in table.ops}
    assert {("norm1", "rmsnorm"), ("qkv", "nobias"), ("swiglu", ""), ("rope", ""), ("rope.bwd", "")} <= variants
    assert {s.shape["tp"] for s in table.ops if s.op == "qkv"} == {1, 2}
    qkv = {s.shape["tp"]: s.n for s in table.ops if s.op == "qkv"}
    assert qkv[1] == 2 * qkv[2] == 128 + 2 * 64  # q + k + v columns (2 kv heads of 32), split over tp
    cfg = compose([*LLAMA, "+cluster=local_cpu", "training.seq_len=64", "parallelism.micro_batch_size=1"])
    single_device(cfg, "fp32", 2)
    report = simulate(cfg, profile=table)
    assert report.extrapolated_ops == () and report.iteration_time_s > 0
    for flash in (True, False):
        run = measure_training(model_spec(cfg.model), 1, 64, 2, torch_device("cpu"), torch.float32, flash,
                               warmup=1, iterations=1)
        assert run.params == model_spec(cfg.model).total_params() and 6.0 < run.loss < 8.0
