"""Fused attention over lengths: the SDPA table (vtrain/profiler/attention_lengths.py, real torch on CPU at
small shapes) and the rate bench/fit_attention.py reads from it."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench
from tests.clirun import run_main_inprocess
from tests.lazy import Lazy, needs_torch
from vtrain.graph.ops import FlashAttention
from vtrain.profiler.table_run import write_table

pytestmark = needs_torch()
torch = Lazy("torch")  # imported by the tests that run, not at collection (tests/lazy.py)
al = Lazy("vtrain.profiler.attention_lengths")

ROOT = Path(__file__).resolve().parents[2]


def test_cases_are_whole_causal_sequences_then_ring_step_blocks():
    assert al.cases(8192) == [al.Case(True, n, n) for n in (2048, 4096, 8192)] + [al.Case(False, 8192, 8192)]
    assert len(al.cases(32768)) == 8 and al.cases(1024) == []
    assert al.cases(131072)[6] == al.Case(True, 131072, 131072) and len(al.cases(131072)) == 10


def test_both_fused_kernels_on_cuda_sdpa_default_elsewhere():
    assert al.backends(torch.device("cpu")) == ("default",)
    assert al.backends(torch.device("cuda")) == ("flash", "cudnn")


def test_the_calls_run_sdpa_forward_and_its_backward():
    fwd, bwd = al.attention_calls(al.Case(True, 32, 32), torch.device("cpu"), heads=2, head_dim=16,
                                  dtype=torch.float32)
    out = fwd()
    assert out.shape == (1, 2, 32, 16)
    dq, dk, dv = bwd()
    assert dq.shape == dk.shape == dv.shape == (1, 2, 32, 16) and float(dq.abs().sum()) > 0


def test_measure_writes_rows_the_model_can_price(tmp_path):
    todo = [al.Case(True, 64, 64), al.Case(False, 32, 32)]
    rows, skipped = al.measure("h200", torch.device("cpu"), todo, warmup=0, repeats=1, heads=2, head_dim=16)
    assert skipped == [] and [(r["causal"], r["q_len"]) for r in rows] == [(1, 64), (0, 32)]
    assert all(float(r["fwd_s"]) > 0 and float(r["bwd_s"]) > 0 for r in rows)
    path = tmp_path / al.TABLE_FILE
    write_table(path, rows, al.COLUMNS)
    back = list(csv.DictReader(path.open()))
    assert [r["backend"] for r in back] == ["default", "default"] and back[0]["batch_heads"] == "2"


CLOCK = 0.8  # the synthetic sustained/burst GEMM ratio written beside each table


def _clock_table(folder, ratio=CLOCK):
    """A sustained_gemm.csv of one bf16 GEMM: a burst at 1000 TFLOP/s, then windows at ratio x that."""
    with (folder / "sustained_gemm.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["recipe", "m", "n", "k", "phase", "tflops"])
        w.writerow(["bf16", 8192, 8192, 8192, "burst", 1000.0])
        w.writerows(["bf16", 8192, 8192, 8192, "sustained", 1000.0 * ratio] for _ in range(4))


def _table(path, device="NVIDIA H200", fwd_s=None, clock=True):
    """A table whose times are what the model prices at 0.3 of the bf16 peak, fwd and bwd alike, in a burst
    (and, with ``clock``, the sustained-clock table beside it)."""
    if clock:
        _clock_table(path.parent)
    rows = []
    for causal, n in ((1, 4096), (1, 8192), (0, 8192)):
        f = FlashAttention("f", 32, n, 128, causal=bool(causal))
        b = FlashAttention("b", 32, n, 128, backward=True, causal=bool(causal))
        rate = 989.4e12 * 0.3
        rows.append({"gpu": "h200", "device": device, "torch": "2.11", "backend": "flash", "causal": causal,
                     "batch_heads": 32, "q_len": n, "kv_len": n, "head_dim": 128,
                     "fwd_s": fwd_s if fwd_s is not None else f.flops / rate, "bwd_s": b.flops / rate})
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=al.COLUMNS)
        w.writeheader()
        w.writerows(rows)


# the fit script on a written table (~2 s of CPU); the fast loop keeps its refusals (test_fit_refuses_in_one_line)
@pytest.mark.slow
def test_fit_reads_the_implied_factor(tmp_path):
    _table(tmp_path / "t.csv")
    p = subprocess.run([sys.executable, "bench/fit_attention.py", "--table", str(tmp_path / "t.csv")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    # 0.3 of the peak in a burst, at the sustained clock 0.8 in a step, over h200's in-step fused-attention
    # efficiency 0.5271 (gpu/h200.yaml)
    implied = round(0.3 * CLOCK / 0.5271, 3)
    assert f"implied torchtitan_fsdp2.attention_kernel_efficiency_by_architecture.hopper: {implied}" in p.stdout
    assert "causal 4096x4096 |   0.300 |   0.300 |  0.300 |" in p.stdout
    assert "in a step at the sustained clock 0.800" in p.stdout


def test_fit_refuses_a_burst_table_without_its_clock(tmp_path, capfd):
    """The refusals run fit_attention.main in this process (test_fit_reads_the_implied_factor runs the script)."""
    _table(tmp_path / "t.csv", clock=False)
    p = run_main_inprocess(load_bench("fit_attention").main, ["--table", str(tmp_path / "t.csv")], capfd)
    assert p.code == 2 and len(p.err_lines) == 1, p.err
    assert "sustained_gemm.csv: no bf16 steady/burst GEMM ratio beside the table" in p.err


@pytest.mark.parametrize("kind, msg", [("cpu", "measured on AMD EPYC, not an NVIDIA GPU"),
                                       ("zero", "t.csv:2: lengths and times must be numbers > 0"),
                                       ("stack", "--stack=nope is not a stack/ config"),
                                       ("backend", "t.csv: no row of backend cudnn; it holds flash")])
def test_fit_refuses_in_one_line(tmp_path, capfd, kind, msg):
    _table(tmp_path / "t.csv", device="AMD EPYC" if kind == "cpu" else "NVIDIA H200",
           fwd_s=0 if kind == "zero" else None)
    extra = {"stack": ["--stack", "nope"], "backend": ["--backend", "cudnn"]}.get(kind, [])
    p = run_main_inprocess(load_bench("fit_attention").main, ["--table", str(tmp_path / "t.csv"), *extra], capfd)
    assert p.code == 2 and len(p.err_lines) == 1 and msg in p.err, p.err


def test_cli_bad_arguments_are_one_line(tmp_path, capfd):
    for argv, msg in ((["--gpu", "h200", "--out", str(tmp_path), "--max-len", "8"], "--max-len: 8 must be >= 16"),
                      (["--gpu", "h200", "--out", str(tmp_path), "--max-len", "1000", "--device", "cpu"],
                       "--max-len=1000 is below the shortest case"),
                      (["--gpu", "x", "--out", str(tmp_path)], "--gpu=x is not a gpu/ config")):
        p = run_main_inprocess(al.main, argv, capfd)
        assert p.code == 2 and len(p.err_lines) == 1 and msg in p.err, (argv, p.err)
    assert not any(tmp_path.iterdir())
