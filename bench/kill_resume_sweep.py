"""kill -9 a search at given delays after its journal appears, resume it, and compare the Pareto front with
an uninterrupted run of the same seed (the sweep behind README "Storage, resume and several workers").

    python bench/kill_resume_sweep.py 0.03 0.05 0.07 0.5 1.0        # delays in seconds
    python bench/kill_resume_sweep.py $(seq 0.02 0.15 3.0)

One line per delay: delay, exit code of the resume, whether the kill interrupted a study with finished
trials, and whether the resumed front equals the uninterrupted one. Exits 1 if any front differs.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_shared_study import _cmd, _front, kill_after  # noqa: E402  (the test's own command, kill, front)

EXTRA = ["search.n_trials=80", "search.population_size=8", "search.seed=3", "tracking=off"]


def main(delays: list) -> int:
    work = Path(tempfile.mkdtemp(prefix="kill_resume_"))
    ref = work / "ref"
    ref.mkdir()
    subprocess.run(_cmd(ref, "run", *EXTRA), cwd=ref, capture_output=True, text=True, check=True)
    want = _front(ref, "run")
    bad = 0
    for i, delay in enumerate(delays):
        case = work / f"k{i}"
        case.mkdir()
        kill_after(case, delay, *EXTRA)
        out = subprocess.run(_cmd(case, "run", *EXTRA), cwd=case, capture_output=True, text=True)
        same = out.returncode == 0 and _front(case, "run") == want
        bad += not same
        print(f"delay {delay:.2f} s: rc={out.returncode} interrupted={'already stored' in out.stdout} "
              f"same_front={same}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{len(delays) - bad} of {len(delays)} resumed fronts equal the uninterrupted one")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main([float(a) for a in sys.argv[1:]] or [0.03, 0.05, 0.07, 0.5, 1.0, 1.5]))
