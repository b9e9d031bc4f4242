#!/usr/bin/env bash
# Does a test kill a mutant? Each line of FILE names a mutant and the test that should kill it, in one of two forms:
#   MUTANT_NAME TEST_NODE_ID
#     a mutant of the copy bench/mutation.sh generated ($MUTATION_WORKDIR/mutants/vtrain), switched on by mutmut's
#     MUTANT_UNDER_TEST;
#   SOURCE_FILE | ORIGINAL TEXT | MUTATED TEXT | TEST_NODE_ID
#     a mutation written by hand (one mutmut's operators cannot make, e.g. 2 -> 1: mutmut adds one to a number) on a
#     copy of the working tree's vtrain/: ORIGINAL TEXT must occur exactly once in SOURCE_FILE.
# The test runs with the working tree's tests, once on the original code (must pass: rc 0) and once on the mutant
# (killed: rc 1). Checks a new test against the survivors of a run without running the whole sample again.
#   bench/mutation_kills.sh FILE
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
WORK=${MUTATION_WORKDIR:-/tmp/vtrain-mutation}
COPY=$(mktemp -d)
trap 'rm -rf "$COPY"' EXIT
git -C "$ROOT" ls-files -co --exclude-standard tests docs profiles bench pyproject.toml README.md | tar -C "$ROOT" -cf - -T - \
  | tar -x -C "$COPY"
cd "$COPY"
pytest_rc() {  # the exit status of one test on the copy's vtrain, with MUTANT_UNDER_TEST=$1
  local rc=0
  MUTANT_UNDER_TEST="$1" PYTHONPATH="$COPY" python -m pytest -x -q -p no:cacheprovider "$2" > /dev/null 2>&1 || rc=$?
  echo "$rc"
}
trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  if [[ "$line" == *" | "* ]]; then  # a hand-written mutation of the working tree's code
    IFS='|' read -r src old new test <<< "$line"
    src=$(trim "$src"); test=$(trim "$test")
    rm -rf vtrain && git -C "$ROOT" ls-files -co --exclude-standard vtrain | tar -C "$ROOT" -cf - -T - | tar -x -C "$COPY"
    rc_clean=$(pytest_rc "" "$test")
    python - "$src" "$old" "$new" <<'PY'
import sys
from pathlib import Path
path, old, new = Path(sys.argv[1]), sys.argv[2].strip(), sys.argv[3].strip()
text = path.read_text()
assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
path.write_text(text.replace(old, new))
PY
    rc_mutant=$(pytest_rc "" "$test")
    name="$src: $(trim "$old") -> $(trim "$new")"
  else
    read -r name test <<< "$line"
    rm -rf vtrain && cp -r "$WORK/mutants/vtrain" "$COPY/"
    rc_clean=$(pytest_rc "" "$test")
    rc_mutant=$(pytest_rc "$name" "$test")
  fi
  verdict=$([ "$rc_clean" = 0 ] && [ "$rc_mutant" = 1 ] && echo killed || echo NOT-killed)
  echo "$verdict $name (original rc $rc_clean, mutant rc $rc_mutant) by $test"
done < "$1"
