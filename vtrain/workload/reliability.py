"""Failure, restart and checkpoint constants of a cluster: the defaults of ClusterSpec's reliability fields
(vtrain/sim/goodput.py turns them into goodput). Each says where it comes from.

Llama 3 405B pre-training (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4 and Table 5): 419
unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs (2,048 nodes of 8); GPU issues (faulty GPUs,
HBM3, SRAM, GPU system processor, silent data corruption, thermal) were 58.7% of them, the rest host, network
and software. The GPU share is counted per GPU, the rest per node.
"""
from __future__ import annotations

LLAMA3_INTERRUPTIONS = 419  # unexpected, Dubey et al. 2024 Sec. 3.3.4
LLAMA3_DAYS = 54.0
LLAMA3_GPUS = 16_384
LLAMA3_GPUS_PER_NODE = 8
LLAMA3_GPU_SHARE = 0.587  # "GPU issues are the largest category, accounting for 58.7% of all unexpected issues"
LLAMA3_EFFECTIVE_TRAINING_TIME = 0.90  # Sec. 3.3.4: "higher than 90% effective training time" (validation only)

_HOURS = LLAMA3_DAYS * 24.0
# per GPU-hour: 0.587 x 419 / (16,384 GPUs x 1,296 h) = 1.16e-5 (a GPU's MTBF ~ 9.8 years)
GPU_FAILURES_PER_H = LLAMA3_GPU_SHARE * LLAMA3_INTERRUPTIONS / (LLAMA3_GPUS * _HOURS)
# per node-hour: 0.413 x 419 / (2,048 nodes x 1,296 h) = 6.52e-5
NODE_FAILURES_PER_H = (1.0 - LLAMA3_GPU_SHARE) * LLAMA3_INTERRUPTIONS / (LLAMA3_GPUS / LLAMA3_GPUS_PER_NODE * _HOURS)
# per-node share of the storage write bandwidth: Llama 3's Tectonic file system sustains 2 TB/s (peak 7 TB/s) for
# 16,384 GPUs (Dubey et al. 2024, Sec. 3.3.1 "Storage"): 2,000 GB/s / 2,048 nodes = 0.98 GB/s per node
CHECKPOINT_WRITE_GB_PER_S_PER_NODE = 2000.0 / (LLAMA3_GPUS / LLAMA3_GPUS_PER_NODE)
# time from a failure to training again, besides reading the checkpoint (detection, rescheduling onto spare
# nodes, process start, NCCL initialisation, data loader warm-up): an ASSUMPTION, not a published figure (Llama 3
# gives none); 10 minutes. Set cluster.restart_s to your site's.
RESTART_S = 600.0
