#!/usr/bin/env bash
# Mutation score of the core packages (workload, graph, comm, cost, sim) on a deterministic sample of mutants,
# against the fast unit tests of those packages. Not part of CI. Needs mutmut 3.8.1 (pip install mutmut==3.8.1).
#   bench/mutation.sh [N_MUTANTS=120] [SEED=44]
# Works on a copy of the committed tree (git archive HEAD) in $MUTATION_WORKDIR (default /tmp/vtrain-mutation),
# never on the working tree; the generated mutants, the test-to-function map and the verdicts are kept there.
# Prints the score over the non-equivalent mutants (bench/mutation_equivalent.txt) and each surviving mutant (docs/testing.md).
set -euo pipefail
N=${1:-120}
SEED=${2:-44}
ROOT=$(git rev-parse --show-toplevel)
WORK=${MUTATION_WORKDIR:-/tmp/vtrain-mutation}
JOBS=${MUTATION_JOBS:-2}
# tests/conftest.py reuses a composed config across tests; a mutant must meet a fresh compose
export VTRAIN_TEST_FRESH_COMPOSE=1
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
TREES=$(git -C "$ROOT" rev-parse HEAD:vtrain HEAD:tests | tr '\n' ' ')
# The unit tests of the core packages (tests/unit/test_<name>.py; the slow ones deselected) and the profile reader's:
# not the search, calibration, validation-table, CLI or I/O tests, which add minutes and reach the core through them.
UNIT="arith attention_length blackwell_ultra block_scaled breakdown build_memo collectives comm_plan core_attn_recompute
cost_model cp_a2a cp_comms cp_ring cuda_graphs domains_doc energy engine_invariants fp8_recipes fsdp2 fusion goodput
gpt_oss_mechanisms inflight_counts interleaved_groups intervals layout_copies llm_foundry_fsdp memory mla_mtp_ops model
moe_model moe_placement moe_schedules moe_sim optimizer_bandwidth overlap_chunks param_counts partial_recompute
pass_memo pinned_activations pinned_collectives pinned_head_and_bandwidth pipeline pipeline_layout pipeline_split
recompute_fit router schedule selective_op side_stream_contention simulate spec_rules structure_memo te_quant torchtitan_tp
training_runs weight_cache"
TESTS="$(for t in $UNIT; do printf 'tests/unit/test_%s.py ' "$t"; done)tests/test_profile_io.py"
start=$(date +%s)
# every step's output goes to a log in $WORK: a step that fails says so here, with its log's tail
python -c "import mutmut" 2>/dev/null || { echo "no mutmut in $(command -v python) (activate the venv)" >&2; exit 1; }
# The work directory is kept between runs and refreshed from HEAD: mutmut regenerates the mutants of changed files,
# maps new tests, and keeps a verdict until its function or the test settings change (remove $WORK for a clean run).
configure() {
  py_list() { printf '"%s", ' "$@" | sed 's/, $//'; }
  cat >> pyproject.toml <<TOML

[tool.mutmut]
source_paths = ["vtrain"]
also_copy = ["docs", "profiles", "bench", "README.md"]
only_mutate = ["vtrain/workload/*", "vtrain/graph/*", "vtrain/comm/*", "vtrain/cost/*", "vtrain/sim/*"]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-m", "not slow"]
pytest_add_cli_args_test_selection = [$(py_list $TESTS)]
TOML
  # vtrain memoises (lru_cache, module-level memos): a test whose answer is already cached never calls the mutated
  # function, so mutmut would map it to the wrong tests and a forked worker could inherit a warm cache. Every test
  # of the run starts with empty caches (this copy's conftest only).
  cat >> tests/conftest.py <<'PY'


@pytest.fixture(autouse=True)
def _mutation_run_empties_vtrain_caches():
    import sys as _sys

    for name, module in list(_sys.modules.items()):
        if not name.startswith("vtrain"):
            continue
        for attr, value in list(vars(module).items()):
            if hasattr(value, "cache_clear"):
                value.cache_clear()
            elif attr in ("_SUMS", "_PARTS", "_GRAPHS", "_COMMS", "_PASSES", "_GROUPS", "_RUNS", "_units", "_MEMO") \
                    and hasattr(value, "clear"):
                value.clear()
    yield
PY
  grep -q "^import pytest" tests/conftest.py || sed -i '1i import pytest' tests/conftest.py
}
if [ ! -d "$WORK/mutants" ]; then
  rm -rf "$WORK" && mkdir -p "$WORK"
  git -C "$ROOT" archive HEAD | tar -x -C "$WORK"
else  # refresh the copy from HEAD: a changed source file gets a new mtime, so mutmut regenerates its mutants
  # the test selection of the last run (a work directory from before selection.txt: its pyproject's)
  [ -f "$WORK/selection.txt" ] || python - "$WORK" <<'PY'
import sys, tomllib
from pathlib import Path
work = Path(sys.argv[1])
tests = tomllib.loads((work / "pyproject.toml").read_text()).get("tool", {}).get("mutmut", {}).get(
    "pytest_add_cli_args_test_selection")
if tests:
    (work / "selection.txt").write_text("".join(f"{t}\n" for t in sorted(tests)))
PY
  rm -rf "$WORK/head" "$WORK/tests" "$WORK/docs" "$WORK/profiles" "$WORK/bench" && mkdir -p "$WORK/head"
  git -C "$ROOT" archive HEAD | tar -x -C "$WORK/head"
  python - "$WORK/head/vtrain" "$WORK/vtrain" "$WORK/mutants/vtrain" <<'PY'
import filecmp, shutil, sys
from pathlib import Path
new, old, mutated = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
for f in old.rglob("*"):
    if f.is_file() and not (new / f.relative_to(old)).exists():
        f.unlink()
for f in new.rglob("*"):
    dst = old / f.relative_to(new)
    if f.is_file() and not (dst.exists() and filecmp.cmp(f, dst, shallow=False)):
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dst)  # a fresh mtime: mutmut sees the file changed
# mutmut rewrites the .py files of mutants/ but copies every other file (configs, data) only when it is missing, and
# never removes one: the copy the tests run on gets HEAD's other files here, and loses a deleted module and its mutants
for f in mutated.rglob("*"):
    rel = f.relative_to(mutated)
    source = new / rel.with_suffix("") if f.suffix in (".meta", ".spans") else new / rel
    if f.is_file() and "__pycache__" not in rel.parts and not source.exists():
        f.unlink()
for f in new.rglob("*"):
    dst = mutated / f.relative_to(new)
    if f.is_file() and f.suffix != ".py" and not (dst.exists() and filecmp.cmp(f, dst, shallow=False)):
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, dst)
PY
  (cd "$WORK/head" && cp -r tests docs profiles bench pyproject.toml README.md "$WORK/") && rm -rf "$WORK/head"
fi
cd "$WORK"
configure
# generate the mutants of every new or changed source file (mutmut run's first step, without its test runs); mutmut
# forgets the verdicts of the functions whose code changed
python - "$JOBS" > mutmut_generate.log 2>&1 <<'PY' || { tail -30 mutmut_generate.log; exit 1; }
import os, sys
from mutmut.__main__ import create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
set_mutant_under_test("mutant_generation")
os.makedirs("mutants", exist_ok=True)
copy_src_dir(); copy_also_copy_files(); setup_source_paths()
stats = create_mutants(int(sys.argv[1]))
print(f"{stats.mutated} files mutated, {stats.ignored} ignored, {stats.unmodified} unchanged")
PY
echo "generated in $(( $(date +%s) - start )) s: $(tail -1 mutmut_generate.log)"
python "$ROOT/bench/mutation_sample.py" sample "$N" "$SEED" > sample.txt && rm -f pending.txt
# mutmut keeps each verdict until the mutant's function or the test settings change; a killed mutant stays killed
# when tests are added, so only the others run again
# mutmut maps a test to the functions it calls once, when it first sees the test's name: after an edit to the code or
# the tests that map is stale (a rewritten test that now reaches a function would never be run on its mutants), so the
# run maps every selected test again (minutes) unless the code and tests are those it was last mapped on.
# A change to the test selection makes mutmut forget every verdict; a selection that only adds test files keeps
# them here (a mutant a test kills stays killed when tests are added), one that drops a file runs the whole sample.
echo $TESTS | tr ' ' '\n' | LC_ALL=C sort > selection.new
if [ -f mutants/mutmut-stats.json ] && [ "$(cat mapped_trees 2>/dev/null)" != "$TREES $(md5sum < selection.new)" ]; then
  added_only=$([ -f selection.txt ] && [ -z "$(LC_ALL=C comm -23 selection.txt selection.new)" ] && echo 1 || echo 0)
  python - "$added_only" <<'PY'
import json, sys
from mutmut.configuration import config
stats = json.load(open("mutants/mutmut-stats.json"))
stats.update(tests_by_mangled_function_name={}, duration_by_test={}, function_dependencies={})
if sys.argv[1] == "1":  # the new selection holds the old one: the killed verdicts stand
    stats["config_fingerprint"] = config().config_fingerprint()
json.dump(stats, open("mutants/mutmut-stats.json", "w"), indent=4)
PY
  [ "$added_only" = 1 ] || cp sample.txt pending.txt
fi
[ -s pending.txt ] || python "$ROOT/bench/mutation_sample.py" pending sample.txt > pending.txt
if [ -s pending.txt ]; then
  mutmut run --max-children "$JOBS" $(cat pending.txt) > mutmut_run.log 2>&1 || { tail -30 mutmut_run.log; exit 1; }
  echo "$TREES $(md5sum < selection.new)" > mapped_trees && mv selection.new selection.txt
fi
python "$ROOT/bench/mutation_sample.py" score sample.txt
echo "commit $COMMIT, seed $SEED, $JOBS workers: $(( $(date +%s) - start )) s in all; logs and mutants in $WORK"
