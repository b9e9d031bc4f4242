"""The scripts (bench/, sweeps/, python -m vtrain.profiler.*) refuse a bad argument in one line, exit 2."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sampling import fast_every
from vtrain.io.args import int_at_least, new_file

ROOT = Path(__file__).resolve().parents[2]


def test_int_at_least_and_new_file(tmp_path):
    assert int_at_least(1)("3") == 3 and int_at_least(0)("0") == 0
    for text, msg in (("0", "0 must be >= 1"), ("x", "'x' is not an integer"), ("1.5", "'1.5' is not an integer")):
        with pytest.raises(argparse.ArgumentTypeError, match=msg):
            int_at_least(1)(text)
    assert new_file(str(tmp_path / "a.png")) == tmp_path / "a.png"
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder, not a file"):
        new_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        new_file(str(tmp_path / "no" / "a.png"))


@pytest.mark.parametrize("argv, msg", fast_every(4, [
    (["bench/bench_cli.py", "--runs", "0"], "bench_cli.py: error: argument --runs: 0 must be >= 1"),
    (["bench/cv_a100.py", "--jobs", "-1"], "cv_a100.py: error: argument --jobs: -1 must be >= 1"),
    (["bench/bench_search.py", "--seeds", "many"], "argument --seeds: 'many' is not an integer"),
    (["bench/fit_intervals.py", "--plot", "/nonexistent/x.png"], "folder /nonexistent does not exist"),
    (["bench/fit_gemm.py", "--bogus"], "fit_gemm.py: error: unrecognized arguments: --bogus"),
    (["sweeps/cheapest_by_deadline.py", "--days", "abc"], "--days=abc: must be comma-separated numbers"),
    (["bench/figures.sh", "--all"], "bench/figures.sh: unknown argument --all (only --cv)"),
    (["bench/fit_attention.py", "--stack", "nope"], "--stack=nope is not a stack/ config"),
    (["bench/fit_attention_length.py", "--bogus"], "fit_attention_length.py: error: unrecognized arguments: --bogus"),
    (["bench/fit_sustained.py", "--bogus"], "fit_sustained.py: error: unrecognized arguments: --bogus"),
]))
def test_script_bad_argument_is_one_line(argv, msg):
    cmd = ["bash", *argv] if argv[0].endswith(".sh") else [sys.executable, *argv]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 2, (argv, p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and msg in p.stderr, p.stderr
