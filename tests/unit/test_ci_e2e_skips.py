"""Under CI=true a skipped end-to-end test fails the run (tests/conftest.py), so CI cannot go green without them;
elsewhere it skips with its reason. Runs pytest on a one-test folder with the suite's conftest."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
TEST = '''import pytest

pytestmark = pytest.mark.e2e


def test_needs_slurm():
    pytest.skip("SLURM is not installed")
'''
PLAIN = '''import pytest


@pytest.mark.skip(reason="not an e2e test")
def test_plain_skip():
    pass
'''


@pytest.mark.slow  # two pytest processes; CI runs it
@pytest.mark.parametrize("ci,code,words", [("true", 1, "an end-to-end test may not skip under CI=true: Skipped: "
                                                      "SLURM is not installed"), ("", 0, "SKIPPED [1]")])
def test_e2e_skip_fails_only_under_ci(tmp_path, ci, code, words):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_e2e.py").write_text(TEST)
    (tmp_path / "test_plain.py").write_text(PLAIN)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    e2e: needs external programs\n")
    # the suite's conftest imports tests.composecache (its compose memo): the repository root on the path
    root = str(CONFTEST.parents[1])
    env = {**os.environ, "CI": ci, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
                        str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == code, p.stdout[-2000:]
    assert words in p.stdout
    assert "SKIPPED [1] test_plain.py" in p.stdout  # a skip outside e2e stays a skip, CI or not
