#!/usr/bin/env bash
# The cheapest plan by deadline as a Hydra multirun (one search per deadline and model); extra overrides pass
# through (e.g. hydra/launcher=slurm). The same curve in one process: python sweeps/cheapest_by_deadline.py
set -e
python -m vtrain -m +model=gpt175b +cluster=a100x1024 search.max_days=25,30,40,60,90,120,180 "$@"
python -m vtrain -m +model=mtnlg530b +cluster=a100x3360 search.max_days=25,30,40,60,90,120,180 "$@"
