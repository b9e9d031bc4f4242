"""Profile files and the profile-driven cost model, without torch: schema checks, one-line errors,
interpolation, analytical fallback with extrapolated ops, nccl-tests import, auto selection."""
from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from tests.sampling import fast_every
from vtrain.api import cost_model_for, simulate
from vtrain.config.build import build_workload
from vtrain.config.compose import compose
from vtrain.cost.collectives import GroupPlacement
from vtrain.cost.profile_io import OPS_FILE, SUSTAINED_FILE, find_profile, read_profile, slugify, write_profile
from vtrain.cost.profiled import Curve, ProfiledCostModel
from vtrain.errors import ProfileError
from vtrain.graph.ops import Collective, CollectiveKind, Gemm, Group, MemoryOp

NCCL_DIR = Path(str(resources.files("vtrain") / "data" / "nccl_allreduce" / "a100"))  # the shipped copy
SINGLE = ["parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=1", "parallelism.sequence_parallel=false",
          "parallelism.distributed_optimizer=false", "parallelism.recompute=none", "training.global_batch_size=4",
          "parallelism.micro_batch_size=2", "training.seq_len=128", "training.precision=fp32"]


def _meta(**kw: object) -> dict:
    base = {"device": "cpu", "device_name": "Test CPU", "gpu": "cpu", "dtype": "fp32", "host_included": True,
            "host_time_per_kernel_s": 0.0, "torch_version": "test", "date": "2026-01-01"}
    return {**base, **kw}


def _row(op: str, t: float, *, m: int = 0, n: int = 0, k: int = 0, batch: int = 0, flops: float = 0.0,
         nbytes: float = 0.0, params: float = 0.0, variant: str = "") -> dict:
    return {"op": op, "variant": variant, "dtype": "fp32", "device": "cpu", "micro_batch": 1, "seq_len": 128,
            "hidden": 128, "tp": 1, "heads": 4, "kv_heads": 4, "head_dim": 32, "ffn": 512, "vocab": 1000,
            "layers": 0, "m": m, "n": n, "k": k, "batch": batch, "flops": flops, "bytes": nbytes, "params": params,
            "samples": 10, "median_s": t, "p10_s": t * 0.9, "p90_s": t * 1.1, "host_s": t}


def _gemm_row(name: str, m: int, n: int, k: int, t: float, variant: str = "") -> dict:
    return _row(name, t, m=m, n=n, k=k, batch=1, flops=2.0 * m * n * k, nbytes=4.0 * (m * k + k * n + m * n),
                variant=variant)


@pytest.fixture()
def synthetic(tmp_path: Path) -> Path:
    rows = [_gemm_row("fc1", 128, 512, 128, 1e-4, "bias"), _gemm_row("fc1", 512, 512, 128, 4e-4, "bias"),
            _row("gelu", 1e-5, nbytes=1e6), _row("gelu", 4e-5, nbytes=4e6),
            _row("adam", 1e-3, params=1e5), _row("adam", 1e-2, params=1e6)]
    return write_profile(tmp_path / "cpu-test", _meta(), rows)


def test_write_read_roundtrip_and_schema(synthetic: Path) -> None:
    table = read_profile(synthetic)
    assert table.meta.gpu == "cpu" and table.meta.dtype == "fp32" and table.meta.host_included
    assert len(table.ops) == 6 and table.ops[0].op == "fc1" and table.ops[0].m == 128
    assert table.ops[0].shape["hidden"] == 128
    meta = json.loads((synthetic / "meta.json").read_text())
    assert meta["schema_version"] == 1 and meta["files"]["ops"] == OPS_FILE
    assert slugify("NVIDIA H200") == "nvidia-h200" and slugify("AMD EPYC 7B13 64-Core") == "amd-epyc-7b13-64-core"


def test_curve_loglog_interpolation() -> None:
    c = Curve([(1.0, 1.0), (100.0, 10.0), (100.0, 10.0)])
    assert c.at(1.0) == 1.0 and c.at(100.0) == 10.0
    assert c.at(10.0) == pytest.approx(10 ** 0.5)  # straight line in log-log
    assert c.at(0.5) is None and c.at(101.0) is None


def test_lookup_exact_interpolated_and_fallback(synthetic: Path) -> None:
    cfg = compose(["+model=tiny", "+cluster=local_cpu", *SINGLE])
    w = build_workload(cfg)
    cm = cost_model_for(w, read_profile(synthetic))
    assert isinstance(cm, ProfiledCostModel) and cm.host_time_s(10) == 0.0
    assert cm.compute_time_s(Gemm("fc1", 128, 512, 128, dtype_bytes=4)) == pytest.approx(1e-4)
    mid = cm.compute_time_s(Gemm("fc1", 256, 512, 128, dtype_bytes=4))  # 2x the FLOPs: between the two
    assert 1e-4 < mid < 4e-4 and mid == pytest.approx(2e-4, rel=1e-6)
    assert cm.compute_time_s(MemoryOp("gelu", 2e6)) == pytest.approx(2e-5, rel=1e-6)
    assert 1e-3 < cm.optimizer_time_s(3e5) < 1e-2
    assert cm.extrapolated() == frozenset()
    big = Gemm("fc1", 4096, 512, 128, dtype_bytes=4)  # beyond the measured FLOPs: analytical, reported
    assert cm.compute_time_s(big) == pytest.approx(cm.fallback.compute_time_s(big))
    cm.compute_time_s(MemoryOp("norm1", 1e6))  # never profiled
    assert cm.extrapolated() == frozenset({"fc1", "norm1"})


def _sustained_csv(path: Path, burst: float, windows: list, recipe: str = "fp32") -> None:
    lines = ["recipe,m,n,k,phase,tflops", f"{recipe},64,64,64,burst,{burst}"]
    lines += [f"{recipe},64,64,64,sustained,{t}" for t in windows]
    path.write_text("\n".join(lines) + "\n")


def test_sustained_table_slows_tensor_core_ops_only(synthetic: Path) -> None:
    """sustained_gemm.csv beside a profile: GEMM (and fused attention) times over the steady/burst ratio of the
    profile's dtype (the second half of the windows: the power cap's settled clock); memory-bound ops as timed."""
    cfg = compose(["+model=tiny", "+cluster=local_cpu", *SINGLE])
    w = build_workload(cfg)
    gemm, gelu = Gemm("fc1", 128, 512, 128, dtype_bytes=4), MemoryOp("gelu", 1e6)
    _sustained_csv(synthetic / SUSTAINED_FILE, 100.0, [100, 95, 90, 80, 80, 80])
    _sustained_csv(synthetic / "other.csv", 100.0, [50, 50], recipe="bf16")
    table = read_profile(synthetic)
    assert table.sustained_fraction == pytest.approx(0.8)
    cm = cost_model_for(w, table)
    assert cm.compute_time_s(gemm) == pytest.approx(1e-4 / 0.8) and cm.compute_time_s(gelu) == pytest.approx(1e-5)
    # another dtype's rows do not count; without the file, the times as measured
    (synthetic / "other.csv").replace(synthetic / SUSTAINED_FILE)
    assert read_profile(synthetic).sustained_fraction is None
    (synthetic / SUSTAINED_FILE).unlink()
    assert cost_model_for(w, read_profile(synthetic)).compute_time_s(gemm) == pytest.approx(1e-4)
    (synthetic / SUSTAINED_FILE).write_text("recipe,m,n,k,phase,tflops\nfp32,1,1,1,warm,3\n")
    with pytest.raises(ProfileError, match="sustained_gemm.csv: line 2: phase 'warm' is not burst or sustained"):
        read_profile(synthetic)
    for windows, shown in (([1000, 1000], "10"), ([1, 1], "0.01")):  # a CPU's warming caches; nonsense
        _sustained_csv(synthetic / SUSTAINED_FILE, 100.0, windows)
        with pytest.raises(ProfileError, match=rf"sustained/burst GEMM rate {shown} of fp32 is outside \(0.3, 1.05\]"):
            read_profile(synthetic)


def test_a_report_says_when_the_sustained_fraction_priced_it(synthetic: Path) -> None:
    _sustained_csv(synthetic / SUSTAINED_FILE, 100.0, [80, 80])
    cfg = compose(["+model=tiny", "+cluster=local_cpu", *SINGLE, "cost.model=profile", f"cost.profile_dir={synthetic}"])
    report = simulate(cfg, profile=find_profile(cfg, required=True))
    assert any("GEMM and fused-attention times / 0.800" in n for n in report.notes), report.notes
    (synthetic / SUSTAINED_FILE).unlink()
    report = simulate(cfg, profile=find_profile(cfg, required=True))
    assert not any("sustained" in n for n in report.notes)


def test_simulate_reports_extrapolated_ops(synthetic: Path) -> None:
    cfg = compose(["+model=tiny", "+cluster=local_cpu", *SINGLE, "cost.model=profile",
                   f"cost.profile_dir={synthetic}"])
    report = simulate(cfg, profile=find_profile(cfg, required=True))
    assert report.cost_model == "profile"
    assert "qkv" in report.extrapolated_ops and "gelu" not in report.extrapolated_ops


def _corrupt(tmp_path: Path, synthetic: Path, how: str) -> Path:
    d = tmp_path / f"bad-{how}"
    d.mkdir()
    meta = (synthetic / "meta.json").read_text()
    ops = (synthetic / OPS_FILE).read_text()
    if how == "json":
        meta = meta[:-10]
    elif how == "column":
        ops = ops.replace("median_s", "med_s", 1)
    elif how == "number":
        lines = ops.splitlines()
        lines[2] = lines[2].replace(",10,", ",ten,", 1)
        ops = "\n".join(lines) + "\n"
    elif how == "dtype":
        meta = meta.replace('"dtype": "fp32"', '"dtype": "bf16"')
    elif how == "version":
        meta = meta.replace('"schema_version": 1', '"schema_version": 99')
    (d / "meta.json").write_text(meta)
    (d / OPS_FILE).write_text(ops)
    return d


@pytest.mark.parametrize("how,needle", [("json", "not valid JSON"), ("column", "missing column(s) median_s"),
                                        ("number", "is not a number"), ("dtype", "does not match meta.json dtype"),
                                        ("version", "schema_version 99")])
def test_corrupt_profile_one_line_error(tmp_path: Path, synthetic: Path, how: str, needle: str) -> None:
    d = _corrupt(tmp_path, synthetic, how)
    with pytest.raises(ProfileError) as err:
        read_profile(d)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and str(d) in msg


def test_mismatched_profile_is_rejected(synthetic: Path) -> None:
    cfg = compose(["+model=tiny", "+cluster=h200x8", *SINGLE[:-1], "training.precision=bf16",
                   f"cost.profile_dir={synthetic}", "cost.model=profile"])
    with pytest.raises(ProfileError, match="profile is for gpu=cpu, the cluster has gpu=h200"):
        find_profile(cfg, required=True)
    cfg = compose(["+model=tiny", "+cluster=local_cpu", *SINGLE[:-1], "training.precision=bf16",
                   f"cost.profile_dir={synthetic}"])
    with pytest.raises(ProfileError, match="profile dtype fp32 does not match training.precision=bf16"):
        find_profile(cfg, required=True)


def test_auto_selects_by_gpu_and_dtype(tmp_path: Path, synthetic: Path) -> None:
    root = synthetic.parent
    cpu = compose(["+model=tiny", "+cluster=local_cpu", *SINGLE, f"cost.profile_dir={root}"])
    assert find_profile(cpu, required=False) is not None
    h200 = compose(["+model=tiny", "+cluster=h200x8", *SINGLE[:-1], f"cost.profile_dir={root}"])
    assert find_profile(h200, required=False) is None  # auto: analytical
    with pytest.raises(ProfileError, match="no profile for gpu=h200 dtype=bf16"):
        find_profile(h200, required=True)


def test_cli_corrupt_profile_exits_with_one_line(tmp_path: Path, synthetic: Path) -> None:
    d = _corrupt(tmp_path, synthetic, "number")
    proc = subprocess.run([sys.executable, "-m", "vtrain", "task=simulate", "+model=tiny", "+cluster=local_cpu",
                           *SINGLE, "cost.model=profile", f"cost.profile_dir={d}", f"hydra.run.dir={tmp_path}/run"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(d / OPS_FILE) in lines[0] and "line 3" in lines[0]


def test_nccl_import_and_collective_lookup(tmp_path: Path) -> None:
    from vtrain.profiler.nccl import import_nccl, parse_nccl_csv

    rows = parse_nccl_csv(NCCL_DIR / "allreduce_8gpu.csv")
    assert rows[0]["kind"] == "all_reduce" and rows[0]["group_size"] == 8 and rows[0]["bytes"] == 2**20
    assert rows[0]["median_s"] == pytest.approx(92150e-9)  # the in-place column
    all_rows = import_nccl(NCCL_DIR)
    d = write_profile(tmp_path / "a100", _meta(device="none", gpu="a100_80gb", dtype="bf16"), [], all_rows)
    table = read_profile(d)
    assert {c.group_size for c in table.collectives} == set(range(2, 9))
    cfg = compose(["+model=gpt_1_7b", "+cluster=vtrain_a100", "parallelism.tp=8", "parallelism.pp=1",
                   "parallelism.dp=1", "parallelism.sequence_parallel=false"])
    cm = cost_model_for(build_workload(cfg), table)
    op = Collective("proj.ar", CollectiveKind.ALL_REDUCE, 64 * 2**20, Group.TP, 8)
    assert cm.collective_time_s(op, GroupPlacement(8, 8)) == pytest.approx(579.6e-6, rel=0.01)  # NOTES 1.3
    small = Collective("tiny.ar", CollectiveKind.ALL_REDUCE, 1024.0, Group.TP, 8)  # below 1 MiB: analytical
    assert cm.collective_time_s(small, GroupPlacement(8, 8)) > 0 and "tiny.ar" in cm.extrapolated()


def test_nccl_bad_file(tmp_path: Path) -> None:
    from vtrain.profiler.nccl import parse_nccl_csv

    f = tmp_path / "allreduce_4gpu.csv"
    f.write_text("size,time\n1,2\n")
    with pytest.raises(ProfileError, match="not the nccl-tests format"):
        parse_nccl_csv(f)


def test_profile_modules_do_not_import_torch() -> None:
    code = ("import sys, vtrain.cost.profiled, vtrain.cost.profile_io, vtrain.profiler.nccl, vtrain.api; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("folder, iterations", fast_every(2, [("h200-llama", 3), ("h200", 8)]))
def test_measured_h200_iterations_from_the_shipped_profile(folder: str, iterations: int) -> None:
    """Validation against measured data: the single-GPU H200 training iterations of profiles/measured/h200 (GPT, 8) and
    profiles/measured/h200-llama (Llama-3 8B's layers, 3, measured after the sustained table: held out), predicted from
    their profile at the power-capped clock sustained_gemm.csv measured (bench/gpu_run.sh on a lent H200)."""
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "bench/h200_measured.py", "--profile", f"profiles/measured/{folder}"],
                       capture_output=True, text=True, cwd=root, timeout=600)
    assert p.returncode == 0, p.stderr
    print(p.stdout)
    lines = {ln.split(":")[0].strip(): ln for ln in p.stdout.splitlines() if "MAPE" in ln}
    mape = {k: float(v.split("MAPE ")[1].split("%")[0]) for k, v in lines.items()}
    assert mape["sustained"] < 6.0 < mape["burst"], p.stdout  # h200: 4.9% vs 10.4%, llama: 3.5% vs 10.8% (README)
    assert f"sustained GEMM fraction 0.830 ({iterations} measured iterations)" in p.stdout


def test_steady_ratio_is_the_settled_windows_median_over_the_burst() -> None:
    """sustained_gemm.csv: a burst row, then windows; the median of the second half of the windows (past the power
    cap's settling) over the burst rate; None without a positive burst or without windows."""
    from vtrain.cost.profile_io import steady_ratio

    def rows(burst, windows):
        return [{"phase": "burst", "tflops": str(burst)}] + [{"phase": "sustained", "tflops": str(x)} for x in windows]

    assert steady_ratio(rows(800.0, [790, 780, 700, 640, 600, 620])) == pytest.approx(620 / 800)
    assert steady_ratio(rows(800.0, [700, 500, 600])) == pytest.approx(550 / 800)  # windows 500, 600
    assert steady_ratio(rows(0.0, [700])) is None and steady_ratio(rows(800.0, [])) is None
    assert steady_ratio([{"phase": "sustained", "tflops": "700"}]) is None


def test_op_variants_are_the_profile_keys_the_shipped_profiles_use() -> None:
    """A profile row's variant (vtrain.cost.profiled.op_variant): the norm kind, bias or not (a GEMM's weight
    gradient excepted), dropout or not, the embedding's positions; profiles/measured/h200-llama/ops.csv keys
    Llama 3's residuals and attention "nodropout"."""
    import csv

    from vtrain.config.build import model_spec
    from vtrain.cost.profiled import op_variant

    llama = model_spec(compose(["+model=llama3_8b", "+cluster=h100x1024"]).model)
    gpt = model_spec(compose(["+model=gpt175b", "+cluster=a100x1024", "model.dropout=0.1"]).model)
    names = ("norm1", "qkv", "qkv.dgrad", "fc2.wgrad", "residual1", "flash_attn.bwd", "embedding", "logits")
    assert [op_variant(n, llama) for n in names] == ["rmsnorm", "nobias", "", "nobias", "nodropout", "nodropout",
                                                    "nopos", ""]
    assert [op_variant(n, gpt) for n in names] == ["layernorm", "bias", "", "bias", "dropout", "dropout",
                                                  "learned+dropout", ""]
    assert op_variant("norm1", None) == ""
    shipped = Path(__file__).parents[1] / "profiles" / "measured" / "h200-llama" / "ops.csv"
    with shipped.open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    assert {(r["op"], r["variant"]) for r in rows if r["op"].startswith(("residual1", "flash_attn"))} == \
        {(n, op_variant(n, llama)) for n in ("residual1", "residual1.bwd", "flash_attn", "flash_attn.bwd")}
