"""Fuzz the command line with random overrides: whatever comes in, ``task=simulate`` ends with exit code
0 and a sane, strict-JSON report, or exit code 2 and one ``vtrain: error:`` line that names a field;
never a traceback, never a hang.

Values stay within sizes the simulator handles in seconds: unbounded inputs (``model.num_layers=1e9``,
``parallelism.grad_bucket_mib=1e-6``) and the domain gaps the fuzz found are the core's to close; they
are listed in ``CORE_GAPS`` below as expected failures with the reason."""
from __future__ import annotations

import json
import math
import random
import time
from typing import List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.clirun import run_inprocess, run_subprocess
from tests.sampling import fast_every
from vtrain.cli.keys import schema_keys

KEYS = sorted(k for k, (tp, _) in schema_keys().items()
              if k.split(".")[0] in ("parallelism", "training", "model", "cluster") and tp in (int, float, bool, str)
              and k != "parallelism.grad_bucket_mib")  # see CORE_GAPS
LEAVES = {k.rpartition(".")[2] for k in schema_keys()} | {"tp", "pp", "dp", "model", "cluster", "gpu", "task"}
INTS = ["-1", "0", "1", "2", "3", "4", "8", "16", "96", "1000"]
FLOATS = ["-1", "0", "1e-3", "0.5", "1", "1.5", "1e3", "nan", "inf", "-inf"]
WORDS = ["interleaved", "gpipe", "1f1b", "full", "selective", "none", "bf16", "fp16", "fp8", "rmsnorm", "rope",
         "abc", "h100_sxm", "../x", "''", "[]", "[1,2]", "null", "true"]
MODELS = ["gpt175b", "tiny", "llama3_8b", "gpt_1_7b"]
CLUSTERS = ["a100x1024", "h200x8", "h100x1024", "local_cpu"]
CASE_LIMIT_S = 60.0  # a hang detector, not a speed target


def _values_for(key: str) -> List[str]:
    tp = schema_keys()[key][0]
    pool = {int: INTS, float: FLOATS, bool: ["true", "false"], str: WORDS}[tp]
    return pool + WORDS[-6:]  # and some of the wrong type


@st.composite
def overrides(draw) -> List[str]:
    out = [f"+model={draw(st.sampled_from(MODELS))}", f"+cluster={draw(st.sampled_from(CLUSTERS))}"]
    if draw(st.booleans()):  # mostly a plan that fits the small clusters, so cases reach the simulator
        out += ["parallelism.tp=1", "parallelism.pp=1", "parallelism.dp=1", "parallelism.sequence_parallel=false",
                "training.global_batch_size=8"]
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(KEYS))
        if draw(st.integers(0, 9)) == 0:
            key = key[:-1] + "x"  # a typo
        value = draw(st.sampled_from(_values_for(key) if key in schema_keys() else INTS))
        out.append(f"{key}={value}")
    return out


def check_outcome(code: int, out: str, err: str, report_path) -> None:
    assert "Traceback" not in err + out, err[-3000:]
    assert code in (0, 2), (code, err[-3000:])
    if code == 2:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("vtrain: error: "), err
        words = set(lines[0].replace("=", " ").replace(".", " ").replace(",", " ").replace("*", " ").split())
        assert words & LEAVES, f"the error names no field: {lines[0]}"
        return
    report = json.loads(report_path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    # MFU/HFU are of the bf16 peak: an FP8 plan's GEMMs run up to 2x it, an FP4 plan's up to 4x
    ceiling = {"fp8": 2.0, "fp8_rowwise": 2.0, "fp8_blockwise": 2.0, "mxfp8": 2.0, "nvfp4": 4.0}.get(
        report["plan"]["precision"], 1.0)
    assert 0 < report["mfu"] <= ceiling and 0 < report["hfu"] <= 1.5 * ceiling, report["mfu"]
    assert math.isfinite(report["iteration_time_s"]) and report["iteration_time_s"] > 0


def _one_case(tmp_path_factory, capfd, case: List[str]) -> None:
    run = tmp_path_factory.mktemp("fuzz") / "run"
    t0 = time.perf_counter()
    res = run_inprocess(["task=simulate", *case, f"hydra.run.dir={run}"], capfd)
    assert time.perf_counter() - t0 < CASE_LIMIT_S
    check_outcome(res.code, res.out, res.err, run / "report.json")
    if res.code == 2:
        assert not run.exists()


_FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.slow
@settings(max_examples=12, derandomize=True, **_FUZZ)
@given(case=overrides())
def test_random_overrides_in_process(tmp_path_factory, capfd, case):
    _one_case(tmp_path_factory, capfd, case)


@pytest.mark.slow
@settings(max_examples=150, **_FUZZ)
@given(case=overrides())
def test_many_random_overrides_in_process(tmp_path_factory, capfd, case):
    _one_case(tmp_path_factory, capfd, case)


@pytest.mark.slow
def test_random_overrides_in_real_processes(tmp_path):
    """The same properties over 30 seeded random cases, each a real ``python -m vtrain`` process."""
    rng = random.Random(15)
    for i in range(30):
        case = [f"+model={rng.choice(MODELS)}", f"+cluster={rng.choice(CLUSTERS)}"]
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(KEYS)
            case.append(f"{key}={rng.choice(_values_for(key))}")
        run = tmp_path / f"r{i}"
        res = run_subprocess(["task=simulate", *case, f"hydra.run.dir={run}"], tmp_path, timeout=CASE_LIMIT_S)
        check_outcome(res.code, res.out, res.err, run / "report.json")


# Gaps in the core's per-field domains the fuzz once found (issue 15): each is now one line naming the field
CORE_GAPS = [
    (["parallelism.grad_bucket_mib=0"], "parallelism.grad_bucket_mib=0"),
    (["parallelism.grad_bucket_mib=nan"], "parallelism.grad_bucket_mib=nan"),
    (["parallelism.grad_bucket_mib=-inf"], "parallelism.grad_bucket_mib=-inf"),
    (["+gpu=a100_80gb", "gpu.gemm_half_efficiency_dim=inf"], "gpu.gemm_half_efficiency_dim=inf"),
    (["+gpu=a100_80gb", "gpu.gemm_max_efficiency=50"], "gpu.gemm_max_efficiency=50"),
    (["+gpu=a100_80gb", "gpu.attention_efficiency=1e-300"], "gpu.attention_efficiency=1e-300"),
    (["training.tokens_to_train=inf"], "training.tokens_to_train=inf"),
    (["cluster.intra_node.latency_s=-1"], "cluster.intra_node.latency_s=-1"),
    (["cluster.inter_node.efficiency=50"], "cluster.inter_node.efficiency=50"),
]


@pytest.mark.parametrize("extra,field", fast_every(3, CORE_GAPS), ids=[" ".join(e) for e, _ in CORE_GAPS])
def test_core_gaps_found_by_the_fuzz(tmp_path, capfd, extra, field):
    res = run_inprocess(["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8",
                         "parallelism.pp=16", "parallelism.dp=8", *extra, f"hydra.run.dir={tmp_path}/r"], capfd)
    assert res.code == 2
    assert field in res.one_line_error()


@pytest.mark.slow
@pytest.mark.parametrize("extra,code", [(["model.num_layers=1000000000"], 2), (["parallelism.grad_bucket_mib=0.1"], 0),
                                        (["training.global_batch_size=100000000"], 2)])
def test_unbounded_inputs_are_rejected_or_bounded(tmp_path, extra, code):
    """Issue 15's bounded work: these end within seconds (the pipeline is extrapolated over its periodic
    steady state, gradient buckets are priced in closed form and drawn in at most 32 bars per chunk); a billion
    layers or a hundred million sequences are beyond any published run by orders of magnitude (issue 41):
    refused with the bound's reason (vtrain/workload/bounds.py)."""
    res = run_subprocess(["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8",
                          "parallelism.pp=16", "parallelism.dp=8", *extra, f"hydra.run.dir={tmp_path}/r"],
                         tmp_path, timeout=20)
    assert res.code == code and "Traceback" not in res.err
    if code == 2:
        assert res.one_line_error().startswith(f"vtrain: error: {extra[0]}: must be an integer in [1, ")
