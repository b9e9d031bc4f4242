"""Deterministic sample of mutmut's mutants and the score of a sampled run (used by bench/mutation.sh).

  python bench/mutation_sample.py sample N SEED   # print N mutant names drawn with SEED from mutants/**/*.meta
  python bench/mutation_sample.py score FILE      # tally the verdicts of the names listed in FILE
  python bench/mutation_sample.py pending FILE    # the names listed in FILE not killed (yet) nor equivalent

Mutants judged equivalent (no input can change an output) are listed in bench/mutation_equivalent.txt, one a line:
``name | the mutated line as mutmut writes it | why``. An entry counts only while that line is still in the named
mutant's code (a mutant's name is its function and its index there: an edit to the function renumbers them), and
the score is over the sampled mutants that are not equivalent.

Run inside mutmut's work directory (the one holding ``mutants/``). mutmut 3 writes one ``<file>.meta`` JSON per
mutated source file with ``exit_code_by_key`` (None: not run yet); its exit codes mean (mutmut.__main__):
1 killed, 0 survived, 33 no covering test, 37 caught by the type checker, 34/35/36/24/152/255 timeout or crash.
"""
from __future__ import annotations

import ast
import hashlib
import json
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
    """The n mutants whose keyed hash is smallest: a uniform draw that an edit elsewhere leaves alone (a mutant's
    name is its function and its index there, so only the mutants of an edited function move)."""
    names = verdicts()
    return sorted(sorted(names, key=lambda name: hashlib.sha256(f"{seed}:{name}".encode()).hexdigest())[:n])


EQUIVALENT = Path(__file__).with_name("mutation_equivalent.txt")


def _squash(text: str) -> str:
    return "".join(text.split())


def mutant_source(name: str) -> str:
    """The code of one mutant, as mutmut wrote it in mutants/ (module path, then the mangled function name)."""
    module, func = name.rsplit(".", 1)
    path = Path("mutants", *module.split(".")).with_suffix(".py")
    text = path.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
            return ast.get_source_segment(text, node) or ""
    return ""


def equivalent(names: list[str]) -> dict[str, str]:
    """The sampled mutants whose entry in bench/mutation_equivalent.txt still matches their code: name -> why."""
    out: dict[str, str] = {}
    wanted = set(names)
    for line in EQUIVALENT.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, mutated, why = (part.strip() for part in line.split("|", 2))
        if name not in wanted:
            continue
        if _squash(mutated) in _squash(mutant_source(name)):
            out[name] = why
        else:
            print(f"stale equivalence entry (its line is not in the mutant any more): {name}", file=sys.stderr)
    return out


def score(names: list[str]) -> None:
    codes = verdicts()
    same = equivalent(names)
    tally: Counter[str] = Counter()
    survivors = []
    for name in names:
        code = codes.get(name)
        kind = ("equivalent" if name in same and code not in KILLED else "killed" if code in KILLED
                else "survived" if code in SURVIVED else "no_tests" if code in NO_TESTS else "not_run")
        tally[kind] += 1
        if kind in ("survived", "no_tests"):
            survivors.append(f"{kind:9s} {name}")
    tested = tally["killed"] + tally["survived"] + tally["no_tests"]
    print(f"sampled {len(names)} of {len(codes)} mutants: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    if tested:
        print(f"mutation score (killed / sampled non-equivalent mutants run): {tally['killed'] / tested:.1%}")
    print("\n".join(survivors))
    print("\n".join(f"equivalent {name}: {why}" for name, why in sorted(same.items()) if name not in codes
                     or codes[name] not in KILLED))


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        print("\n".join(sample(int(sys.argv[2]), int(sys.argv[3]))))
    elif sys.argv[1] == "pending":  # neither killed nor listed equivalent (each of those runs every test it maps)
        codes = verdicts()
        names = Path(sys.argv[2]).read_text().split()
        same = equivalent(names)
        print("\n".join(n for n in names if codes.get(n) not in KILLED and n not in same))
    else:
        score(Path(sys.argv[2]).read_text().split())
