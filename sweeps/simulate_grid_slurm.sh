#!/usr/bin/env bash
# 2 models x 2 clusters, one task=simulate job each, as a SLURM array (hydra-submitit-launcher).
# Partition/time/CPUs: hydra.launcher.partition=... hydra.launcher.timeout_min=... (conf/hydra/launcher/slurm.yaml)
exec python -m vtrain -m task=simulate +model=gpt175b,llama3_70b +cluster=a100x1024,h100x1024 hydra/launcher=slurm "$@"
