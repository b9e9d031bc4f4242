"""The torch-based operator profiler and the single-device training run of ``task=measure``.

Only this package imports torch (lazily, from the CLI tasks). Modules:
``device`` (names, dtypes, sync), ``timing`` (warm-up, synchronised repeated timing, median/p10/p90),
``layers`` (the transformer's functional building blocks, shared by the model and the op benchmarks),
``model`` (a GPT/Llama block stack and its training loop), ``ops`` (one torch benchmark per graph op),
``sweep`` (the shape sweep that writes profile rows), ``collectives`` (torch.distributed timing),
``nccl`` (import of nccl-tests CSV output; no torch), ``scaled_gemm`` (bf16 / per-tensor / rowwise / blockwise
FP8 GEMMs side by side) and ``attention_lengths`` (SDPA over sequence lengths): two component tables for
``bench/fit_gemm.py --scaled`` and ``bench/fit_attention.py``.
"""
