#!/usr/bin/env bash
# Gather the pure-Python packages vtrain's command line needs and the lent GPU machine's image lacks (it has
# torch, numpy, scipy, PyYAML, packaging and attrs, not Hydra or OmegaConf: /work/.library/device/KINDS.md)
# into .devsite/ (git-ignored), copied from this checkout's virtual environment. Pure Python, so a copy made
# under Python 3.11 here imports under the machine's 3.12. Then, in one device call:
#   run(command='set -o pipefail; PYTHONPATH=.devsite PYTHONUNBUFFERED=1 bash bench/gpu_run.sh 2>&1 | tee $OUT/gpu_run.log',
#       carry=['.devsite'], timeout_s=540)
# gpu_run.sh copies profiles/measured/h200/ under $OUT after each step and when it ends; commit what comes back.
#   usage: bash bench/device_site.sh            (PYTHON=... to pick the interpreter whose packages to copy)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=.devsite
rm -rf "$DEST" && mkdir -p "$DEST"
"$PY" - "$DEST" <<'PY'
import importlib, pathlib, shutil, sys
dest = pathlib.Path(sys.argv[1])
for name in ("hydra", "omegaconf", "antlr4"):  # hydra-core, omegaconf and its parser runtime
    pkg = pathlib.Path(importlib.import_module(name).__file__).parent
    if any(pkg.rglob("*.so")):
        sys.exit(f"bench/device_site.sh: {name} has compiled parts; carry a wheel built for the machine instead")
    shutil.copytree(pkg, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    print(f"{name}: {pkg} -> {dest / name}")
PY
du -sh "$DEST"
