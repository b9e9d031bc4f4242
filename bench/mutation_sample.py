"""Deterministic sample of mutmut's mutants and the score of a sampled run (used by bench/mutation.sh).

  python bench/mutation_sample.py sample N SEED   # print N mutant names drawn with SEED from mutants/**/*.meta
  python bench/mutation_sample.py score FILE      # tally the verdicts of the names listed in FILE

Run inside mutmut's work directory (the one holding ``mutants/``). mutmut 3 writes one ``<file>.meta`` JSON per
mutated source file with ``exit_code_by_key`` (None: not run yet); its exit codes mean (mutmut.__main__):
1 killed, 0 survived, 33 no covering test, 37 caught by the type checker, 34/35/36/24/152/255 timeout or crash.
"""
from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path

KILLED = {1, 3, -24, 24, 152, 255, -11, -9, 34, 35, 36, 37}  # a failing test, a timeout or crash, the type checker
SURVIVED = {0, 5}  # 5: pytest found no test to run
NO_TESTS = {33}


def verdicts() -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for meta in sorted(Path("mutants").rglob("*.meta")):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def sample(n: int, seed: int) -> list[str]:
    names = sorted(verdicts())
    return sorted(random.Random(seed).sample(names, min(n, len(names))))


def score(names: list[str]) -> None:
    codes = verdicts()
    tally: Counter[str] = Counter()
    survivors = []
    for name in names:
        code = codes.get(name)
        kind = ("killed" if code in KILLED else "survived" if code in SURVIVED else "no_tests" if code in NO_TESTS
                else "not_run")
        tally[kind] += 1
        if kind in ("survived", "no_tests"):
            survivors.append(f"{kind:9s} {name}")
    tested = tally["killed"] + tally["survived"] + tally["no_tests"]
    print(f"sampled {len(names)} of {len(codes)} mutants: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    if tested:
        print(f"mutation score (killed / sampled mutants run): {tally['killed'] / tested:.1%}")
    print("\n".join(survivors))


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        print("\n".join(sample(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        score(Path(sys.argv[2]).read_text().split())
