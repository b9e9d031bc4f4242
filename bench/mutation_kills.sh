#!/usr/bin/env bash
# Does a test kill a mutant? For each line "MUTANT_NAME TEST_NODE_ID" of FILE: the test run on the mutated copy
# that bench/mutation.sh generated ($MUTATION_WORKDIR/mutants/vtrain), with the working tree's tests, once with the
# original code (must pass: rc 0) and once with the mutant switched on (mutmut's MUTANT_UNDER_TEST; killed: rc 1).
# Checks a new test against the survivors of a run without running the whole sample again.
#   bench/mutation_kills.sh FILE
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
WORK=${MUTATION_WORKDIR:-/tmp/vtrain-mutation}
COPY=$(mktemp -d)
trap 'rm -rf "$COPY"' EXIT
cp -r "$WORK/mutants/vtrain" "$COPY/"
git -C "$ROOT" ls-files -co --exclude-standard tests docs profiles bench pyproject.toml README.md | tar -C "$ROOT" -cf - -T - \
  | tar -x -C "$COPY"
cd "$COPY"
while read -r name test; do
  [ -z "$name" ] && continue
  rc_clean=0; MUTANT_UNDER_TEST="" PYTHONPATH="$COPY" python -m pytest -x -q -p no:cacheprovider "$test" \
    > /dev/null 2>&1 || rc_clean=$?
  rc_mutant=0; MUTANT_UNDER_TEST="$name" PYTHONPATH="$COPY" python -m pytest -x -q -p no:cacheprovider "$test" \
    > /dev/null 2>&1 || rc_mutant=$?
  verdict=$([ "$rc_clean" = 0 ] && [ "$rc_mutant" = 1 ] && echo killed || echo NOT-killed)
  echo "$verdict $name (original rc $rc_clean, mutant rc $rc_mutant) by $test"
done < "$1"
