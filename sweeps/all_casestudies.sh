#!/usr/bin/env bash
# All three case studies as one Hydra multirun (one job each). Locally (sequential) by default; add
#   hydra/launcher=local   (parallel local processes)   or   hydra/launcher=slurm   (sbatch array)
exec python -m vtrain -m +casestudy=mtnlg_parallel,multitenant,compute_optimal "$@"
