"""The burst-vs-sustained GEMM table (vtrain/profiler/sustained_gemm.py), run for real on the CPU at a tiny shape:
the rows, the steady/burst ratio and the one-line errors. On CUDA it also reads NVML; here those columns are blank."""
import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import run_main_inprocess
from tests.lazy import Lazy, needs_torch
from vtrain.cost.profile_io import steady_ratio

pytestmark = needs_torch()
torch = Lazy("torch")  # imported by the tests that run, not at collection (tests/lazy.py)
sg = Lazy("vtrain.profiler.sustained_gemm")
Recipe = Lazy("vtrain.profiler.scaled_gemm", "Recipe")

ROOT = Path(__file__).resolve().parents[2]


def test_a_burst_row_then_sustained_windows_for_each_recipe_and_shape():
    rows, skipped = sg.measure("h200", torch.device("cpu"), shapes=[(64, 64, 64)], recipes=[Recipe("bf16", False)],
                               seconds=0.2, window_s=0.02, cool_s=0.0, warmup=0, repeats=1)
    assert skipped == []
    assert rows[0]["phase"] == "burst" and all(r["phase"] == "sustained" for r in rows[1:]) and len(rows) >= 3
    assert all(float(r["tflops"]) > 0 and int(r["calls"]) >= 1 for r in rows)
    assert all(r["sm_clock_mhz"] == "" for r in rows)  # no NVML on a CPU
    times = [float(r["t_s"]) for r in rows[1:]]
    assert times == sorted(times) and times[-1] >= 0.2
    assert steady_ratio(rows) > 0


def test_the_sensors_are_read_as_each_window_completes(monkeypatch):
    """Each window's clock/power/temperature is read right after that window, not once after the run: the
    reader is called once per window, in order. The run's clock is a counter (each reading 0.1 s later), so the
    number of windows does not depend on how busy the shared machine is."""
    calls = []
    ticks = iter(0.1 * i for i in range(10_000))
    monkeypatch.setattr(sg.time, "perf_counter", lambda: next(ticks))

    def read():
        calls.append(len(calls) + 1)
        return (float(calls[-1]), 1.0, 1.0)

    def mm():
        return torch.mm(torch.ones(32, 32), torch.ones(32, 32))

    # 1 s of windows; the clock reads 4 times a window (loop test, window start, window end, stamp): 3 windows
    windows = sg.sustained(mm, torch.device("cpu"), 1.0, 0.01, 1e-4, sg.Sensors(read))
    stamps = [float(str(w[3]["sm_clock_mhz"])) for w in windows]
    assert len(windows) == 3 and stamps == [1.0, 2.0, 3.0] and len(calls) == 3
    assert [w[1] for w in windows] == [100, 100, 100]  # calls per window: 0.01 s / 1e-4 s per call
    assert all(w[3]["sm_clock_mhz"] == "" for w in sg.sustained(lambda: None, torch.device("cpu"), 0.3, 0.005, 1e-4))


def test_steady_ratio_is_the_second_half_median_over_the_burst():
    rows = [{"phase": "burst", "tflops": "100"}] + [{"phase": "sustained", "tflops": str(t)}
                                                    for t in (100, 98, 90, 80, 82, 81)]
    assert steady_ratio(rows) == pytest.approx(0.81)
    assert steady_ratio(rows[:1]) is None


# a real profiler process (torch's import, ~4 s of CPU); the fast loop measures in process
# (test_a_burst_row_then_sustained_windows_for_each_recipe_and_shape)
@pytest.mark.slow
def test_the_table_is_written_whole(tmp_path):
    p = subprocess.run([sys.executable, "-m", "vtrain.profiler.sustained_gemm", "--gpu", "h200", "--out", str(tmp_path),
                        "--device", "cpu", "--seconds", "1", "--window-ms", "200", "--cool-s", "0", "--warmup", "0",
                        "--repeats", "1", "--shapes", "64x64x64"], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    back = list(csv.DictReader((tmp_path / sg.TABLE_FILE).open()))
    assert {r["phase"] for r in back} == {"burst", "sustained"} and tuple(back[0]) == sg.COLUMNS


def test_bad_arguments_are_one_line(tmp_path, capfd):
    """In this process (test_the_table_is_written_whole runs the real one)."""
    for argv, msg in ((["--gpu", "x", "--out", str(tmp_path)], "--gpu=x is not a gpu/ config"),
                      (["--gpu", "h200", "--out", str(tmp_path), "--seconds", "0"], "--seconds: 0 must be >= 1"),
                      (["--gpu", "h200", "--out", str(tmp_path), "--shapes", "8x8"], "--shapes: '8x8' is not MxNxK")):
        p = run_main_inprocess(sg.main, argv, capfd)
        assert p.code == 2 and len(p.err_lines) == 1 and msg in p.err, (argv, p.err)
    assert not any(tmp_path.iterdir())
