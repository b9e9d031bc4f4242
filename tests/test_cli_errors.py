"""Bad input: one line naming the field and the rule, exit code 2, no traceback, nothing written."""
import subprocess
import sys
from pathlib import Path

import pytest

BASE = ["task=simulate", "+model=gpt175b", "+cluster=a100x1024"]
CASES = [
    (["parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=16"], "exceeds the 1024 GPUs"),
    (["parallelism.tp=5", "parallelism.pp=1", "parallelism.dp=1"], "tp=5 must divide attention heads=96"),
    (["parallelism.tp=8", "parallelism.pp=7", "parallelism.dp=1"], "pp=7 must divide layers=96"),
    (["parallelism.tp=8", "parallelism.pp=4", "parallelism.dp=4", "parallelism.schedule=interleaved",
      "parallelism.virtual_stages=5"], "pp*virtual_stages=4*5=20 must divide layers=96"),
    (["parallelism.tp=8", "parallelism.pp=2", "parallelism.dp=7"], "must divide global_batch_size=1536"),
    (["parallelism.tp=1", "parallelism.pp=2", "parallelism.dp=2", "parallelism.sequence_parallel=true"],
     "sequence_parallel=true needs tp>1"),
    (["parallelism.tp=0"], "parallelism.tp=0 must be an integer >= 1"),
    (["parallelism.micro_batch_size=-1"], "parallelism.micro_batch_size=-1 must be an integer >= 1"),
    (["model.hidden_size=0"], "model.hidden_size=0 must be an integer >= 1"),
    (["model.vocab_divisible_by=-1"], "model.vocab_divisible_by=-1 must be an integer >= 0"),
    (["parallelism.schedule=zigzag"], "parallelism.schedule=zigzag is not one of"),
]


def run_cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "vtrain", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("overrides,message", CASES)
def test_bad_plan(tmp_path, overrides, message):
    proc = run_cli([*BASE, *overrides], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not any(Path(tmp_path).rglob("*.json")) and not (tmp_path / "outputs").exists() or \
        not any(p.is_file() for p in (tmp_path / "outputs").rglob("*"))


@pytest.mark.parametrize("args,message", [
    (["task=simulate", "+model=gpt9000", "+cluster=a100x1024"],
     "model=gpt9000 is unknown; one of: deepseek_v3, gpt175b"),
    (["task=simulate", "+model=gpt175b", "+cluster=nowhere"], "cluster=nowhere is unknown"),
    (["task=simulate", "+cluster=a100x1024"], "model is not set: add +model=<name>, one of:"),
    (["task=simulate", "+model=gpt175b"], "cluster is not set: add +cluster=<name>, one of:"),
    (["task=simulate", "+model=gpt175b", "+cluster=a100x1024", "+gpu=tpu"], "gpu=tpu is unknown"),
    (["task=dance", "+model=gpt175b", "+cluster=a100x1024"], "task=dance is not one of"),
    (["task=calibrate", "+cluster=vtrain_a100", "calibrate.fit_on=weak"],
     "calibrate.fit_on=weak is not one of joint, single_node"),
    (["task=calibrate", "+cluster=vtrain_a100", "calibrate.fit_on=single_node", "calibrate.folds=weak_scaling"],
     "calibrate.folds=weak_scaling needs calibrate.fit_on=joint"),
])
def test_unknown_names(tmp_path, args, message):
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_simulate_writes_report_and_timeline(tmp_path):
    proc = run_cli([*BASE, "parallelism.tp=8", "parallelism.pp=16", "parallelism.dp=8",
                    "parallelism.micro_batch_size=1", "hydra.run.dir=run"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "iteration time" in proc.stdout and "MFU" in proc.stdout
    import json

    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["gpus_used"] == 1024 and report["fits"] in (True, False)
    trace = json.loads((tmp_path / "run" / "timeline.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    assert (tmp_path / "run" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "vtrain" in (tmp_path / "run" / ".hydra" / "hydra.yaml").read_text()


def test_multirun_bad_job_fails_alone(tmp_path):
    """In a sweep, a job with bad input fails (its one line on stderr) and the other jobs still run."""
    proc = run_cli(["-m", *BASE, "parallelism.tp=5,8", "parallelism.pp=16", "parallelism.dp=8",
                    "tracking.enabled=false"], tmp_path)
    assert proc.returncode != 0
    assert "vtrain: error: tp=5 must divide attention heads=96" in proc.stderr
    reports = list((tmp_path / "outputs" / "multirun").rglob("report.json"))
    assert len(reports) == 1  # the tp=8 job
