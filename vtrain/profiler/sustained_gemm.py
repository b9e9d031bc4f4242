"""Time one GEMM in a burst (as the GEMM tables do) and sustained for seconds (as a training step runs it).

Why: the cost model prices a GEMM inside a training step at ``gpu.sustained_gemm_fraction`` of its benchmarked
rate (0.778 on Hopper, fitted on one 8-GPU DeepSpeed step decomposition, bench/fit_sustained.py). Part of that
is physical and single-GPU: a GPU running GEMMs back to back for seconds draws its board power and lowers its
clock to stay within it, while a benchmark's few calls after an idle gap run at the boost clock. This table
measures that part alone: the same GEMM timed the tables' way (:func:`vtrain.profiler.timing.time_op`: warm-up,
then single calls with the GPU kept busy by a short spin) and then back to back for ``--seconds``, in windows of
``--window-ms`` timed with CUDA events, with the SM clock, board power and temperature read through NVML as each
window completes (blank where NVML cannot be read). In a profile folder, the profile-driven cost model divides the
profile's GEMM and fused-attention times by the median steady/burst ratio of the profile's dtype
(:func:`vtrain.cost.profile_io.sustained_fraction`).

    python -m vtrain.profiler.sustained_gemm --gpu h200 --out profiles/measured/h200 [--seconds 8] [--device cuda]
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from vtrain.cost.profile_io import steady_ratio
from vtrain.errors import VtrainError
from vtrain.io.args import int_at_least
from vtrain.profiler.device import device_name
from vtrain.profiler.scaled_gemm import Recipe, gemm
from vtrain.profiler.table_run import MEASURE_ERRORS, check_args, finish, open_device, reason, release, table_parser
from vtrain.profiler.timing import time_op

TABLE_FILE = "sustained_gemm.csv"
COLUMNS = ("gpu", "device", "torch", "recipe", "m", "n", "k", "phase", "t_s", "calls", "time_s", "tflops",
           "sm_clock_mhz", "power_w", "temp_c")
# a square GEMM as the MAMF search and the tables' largest shapes, and Llama-3 8B's MLP GEMM at 16K tokens
SHAPES: Tuple[Tuple[int, int, int], ...] = ((8192, 8192, 8192), (16384, 14336, 4096))
RECIPES: Tuple[Recipe, ...] = (Recipe("bf16", False), Recipe("fp8", True))
NO_READING: Dict[str, object] = {"sm_clock_mhz": "", "power_w": "", "temp_c": ""}  # NVML absent or failing


def nvml_handle(pynvml: Any, dev: torch.device) -> Any:
    """NVML's handle of a CUDA device by its PCI bus id (NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES); by index
    where this torch does not report the id."""
    p = torch.cuda.get_device_properties(dev)
    ids = [getattr(p, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(i, int) for i in ids):
        return pynvml.nvmlDeviceGetHandleByPciBusId(f"{ids[0]:08X}:{ids[1]:02X}:{ids[2]:02X}.0")
    return pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)


@dataclass(frozen=True)
class Sensors:
    """SM clock (MHz), board power (W), temperature (C) of one GPU through NVML; None where unreadable."""

    read: Optional[Callable[[], Tuple[float, float, float]]]

    @staticmethod
    def open(dev: torch.device) -> "Sensors":
        if dev.type != "cuda":
            return Sensors(None)
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            h = nvml_handle(pynvml, dev)
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        except Exception:  # no NVML (library, driver or sandbox): the times alone
            return Sensors(None)

        def read() -> Tuple[float, float, float]:
            return (float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                    pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
                    float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
        return Sensors(read)

    def sample(self) -> Dict[str, object]:
        if self.read is None:
            return NO_READING
        try:
            clock, power, temp = self.read()
        except Exception:
            return NO_READING
        return {"sm_clock_mhz": f"{clock:.0f}", "power_w": f"{power:.1f}", "temp_c": f"{temp:.0f}"}


def sustained(fn: Callable[[], Any], dev: torch.device, seconds: float, window_s: float, first_s: float,
              sensors: Optional[Sensors] = None) -> List[Tuple[float, int, float, Dict[str, object]]]:
    """(seconds since the start, calls, seconds per call, the sensors read as the window ended) of each window of
    back-to-back calls, for ``seconds``. The calls per window come from ``first_s``, one call's time; on CUDA each
    window is timed with events and the sensors are read right after it completes."""
    calls = max(1, int(window_s / max(first_s, 1e-9)))
    out: List[Tuple[float, int, float, Dict[str, object]]] = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            took = start.elapsed_time(end) / 1e3
        else:
            w0 = time.perf_counter()
            for _ in range(calls):
                fn()
            took = time.perf_counter() - w0
        out.append((time.perf_counter() - t0, calls, took / calls, sensors.sample() if sensors else NO_READING))
    return out


def _row(gpu: str, dev: torch.device, r: Recipe, shape: Tuple[int, int, int], phase: str, t_s: float,
         calls: int, per_call_s: float, sensors: Dict[str, object]) -> Dict[str, object]:
    m, n, k = shape
    return {"gpu": gpu, "device": device_name(dev), "torch": torch.__version__, "recipe": r.name, "m": m, "n": n,
            "k": k, "phase": phase, "t_s": f"{t_s:.3f}", "calls": calls, "time_s": f"{per_call_s:.6g}",
            "tflops": f"{2 * m * n * k / per_call_s / 1e12:.6g}", **sensors}


def measure(gpu: str, dev: torch.device, shapes: Sequence[Tuple[int, int, int]] = SHAPES,
            recipes: Sequence[Recipe] = RECIPES, seconds: float = 8.0, window_s: float = 0.1, cool_s: float = 5.0,
            warmup: int = 2, repeats: int = 5, log: Optional[Callable[[str], None]] = None
            ) -> Tuple[List[Dict[str, object]], List[str]]:
    """Rows of the table (one burst row and one row per sustained window for each recipe and shape), and what
    could not run. Before each burst the GPU idles ``cool_s`` (clocks and power back to rest)."""
    sensors = Sensors.open(dev)
    rows: List[Dict[str, object]] = []
    skipped: List[str] = []
    for r in recipes:
        for shape in shapes:
            label = f"{r.name}{' fast-accum' if r.fast_accum else ''} {'x'.join(map(str, shape))}"
            try:
                fn = gemm(r, *shape, dev)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                time.sleep(cool_s)
                idle = sensors.sample()
                burst = time_op(fn, dev, warmup=warmup, repeats=repeats)
                mine = [_row(gpu, dev, r, shape, "burst", 0.0, repeats, burst.median_s, idle)]
                for t_s, calls, per_call, read in sustained(fn, dev, seconds, window_s, burst.median_s, sensors):
                    mine.append(_row(gpu, dev, r, shape, "sustained", t_s, calls, per_call, read))
            except MEASURE_ERRORS as exc:
                skipped.append(f"{label}: {reason(exc)}")
                continue
            finally:
                release(dev)
            rows += mine
            ratio = steady_ratio(mine)
            if log:
                last = mine[-1]
                log(f"{label}: burst {float(str(mine[0]['tflops'])):7.1f} TFLOP/s (clock at rest "
                    f"{idle['sm_clock_mhz'] or '?'} MHz), sustained {len(mine) - 1} windows, steady/burst "
                    f"{ratio:.3f}; last window {float(str(last['tflops'])):7.1f} TFLOP/s at "
                    f"{last['sm_clock_mhz'] or '?'} MHz, {last['power_w'] or '?'} W, {last['temp_c'] or '?'} C")
    return rows, skipped


def parse_shapes(text: str) -> List[Tuple[int, int, int]]:
    """``MxNxK[,MxNxK...]`` -> shapes; anything else is a one-line error."""
    out = []
    for item in text.split(","):
        dims = item.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise VtrainError(f"--shapes: {item.strip()!r} is not MxNxK with positive integers")
        out.append((int(dims[0]), int(dims[1]), int(dims[2])))
    return out


def main(argv: Sequence[str]) -> int:
    ap = table_parser("python -m vtrain.profiler.sustained_gemm", __doc__.splitlines()[0], TABLE_FILE)
    ap.add_argument("--seconds", type=int_at_least(1), default=8, help="how long each GEMM runs back to back")
    ap.add_argument("--window-ms", type=int_at_least(1), default=100, help="the length of one timed window")
    ap.add_argument("--cool-s", type=int_at_least(0), default=5, help="idle seconds before each burst")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                    help="comma-separated MxNxK GEMM shapes")
    args = ap.parse_args(argv)
    try:
        check_args(args)
        shapes = parse_shapes(args.shapes)
        dev, created = open_device(args)
    except VtrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows, skipped = measure(args.gpu, dev, shapes, seconds=float(args.seconds), window_s=args.window_ms / 1e3,
                            cool_s=float(args.cool_s), warmup=args.warmup, repeats=args.repeats, log=print)
    return finish(args.out / TABLE_FILE, COLUMNS, rows, skipped, created, "GEMM window", device_name(dev))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
