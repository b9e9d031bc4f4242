"""Three workers on one study, the first killed with -9 mid-run and restarted, five times in a row on the
journal and on SQLite (the loop behind docs/search_guide.md "Storage, resume and several workers"; the
slow test runs it once per storage).

    python bench/shared_study_soak.py            # 5 rounds x (journal, sqlite), n_trials=60
    python bench/shared_study_soak.py 10 120     # rounds, n_trials

One line per round: exit codes of the live and restarted workers, finished trials, FAIL/RUNNING/WAITING
trials, plans simulated twice, child runs, trials taken over from the killed worker; a round breaks a rule
if a trial lacks exactly one MLflow child run, a run is left RUNNING or a process group is left behind.
Exits 1 if any round breaks a rule.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_shared_study import three_workers_one_killed  # noqa: E402  (the test's own scenario)


def check(got: dict, n: int) -> list:
    """The rules a round breaks (empty: none)."""
    s = got["states"]
    bad = [f"exit codes {got['codes']}"] if any(got["codes"]) else []
    bad += [f"{got['finished']} finished"] if got["finished"] != n else []
    bad += [f"{k} {s[k]}" for k in ("FAIL", "RUNNING", "WAITING") if s[k]]
    bad += [f"{got['simulated_twice']} plans simulated twice"] if got["simulated_twice"] else []
    one_each = sorted(got["children"]) == got["finished_numbers"] and set(got["children"].values()) <= {1}
    bad += ["not one child run per finished trial"] if not one_each else []
    bad += [f"{got['running_runs']} MLflow runs RUNNING"] if got["running_runs"] else []
    bad += [f"{got['left_behind']} process groups left"] if got["left_behind"] else []
    bad += ["not killed mid-run"] if not got["killed"] else []
    return bad


def main(rounds: int, n: int) -> int:
    failures = 0
    for kind in ("journal", "sqlite"):
        for i in range(rounds):
            work = Path(tempfile.mkdtemp(prefix=f"soak_{kind}_"))
            t0 = time.perf_counter()
            got = three_workers_one_killed(work, kind, n)
            bad = check(got, n)
            failures += bool(bad)
            print(f"{kind} round {i + 1}: {time.perf_counter() - t0:.0f} s, codes {got['codes']}, "
                  f"{got['finished']} finished, states {dict(got['states'])}, twice {got['simulated_twice']}, "
                  f"child runs {sum(got['children'].values())}, taken over {got['taken_over']}, "
                  f"left behind {got['left_behind']}: "
                  f"{'ok' if not bad else 'BROKEN: ' + '; '.join(bad)}", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    print(f"{2 * rounds - failures} of {2 * rounds} rounds kept every rule")
    return 1 if failures else 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    sys.exit(main(args[0] if args else 5, args[1] if len(args) > 1 else 60))
