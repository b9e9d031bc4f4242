"""The valid range of every number of the model, cluster, parallelism, training and pricing config groups, each
with its reason: one table, rendered into ``docs/configs.md`` (:mod:`vtrain.config.domains_doc`).

Lower ends are what the quantity means (a count is a positive integer, a price is not negative). Upper ends are
physical plausibility: about two orders of magnitude beyond the largest value of any published training run
(the run is named in each reason), so a typo such as ``model.num_layers=1e12`` or ``model.vocab_size=2^63`` is
refused in one line instead of simulated for a meaningless result, while every real run and its next
generations stay far inside. Cross-field limits (weights that fit the cluster, tokens per batch, GPUs of the
cluster) are :data:`MAX_CLUSTER_GPUS`, :data:`MAX_BATCH_TOKENS` and :data:`WEIGHT_BYTES_PER_PARAM`, checked in
:mod:`vtrain.config.validate`.
"""
from __future__ import annotations

from vtrain.workload.fields import Domain


def _int(lo: int, hi: int, why: str) -> Domain:
    return Domain(lo=float(lo), hi=float(hi), integer=True, why=why)


# --- model/ (published shapes: Llama 3 405B, Dubey et al. 2024, Table 3; MT-NLG 530B, Smith et al. 2022,
# Table 1; PaLM 540B, Chowdhery et al. 2022, Table 1; DeepSeek-V3, 2024, Sec. 4.2; Switch-C, Fedus et al. 2022)
LAYERS = _int(1, 10_000, "the deepest published model has 126 layers (Llama 3 405B)")
OPTIONAL_LAYERS = _int(0, 10_000, "at most the layers of the deepest plausible model (126 published, Llama 3 405B)")
WIDTH = _int(1, 2**20, "the widest published model has hidden size 20,480 (MT-NLG 530B)")
HEADS = _int(1, 2**14, "the most published attention heads are 128 (Llama 3 405B, MT-NLG, DeepSeek-V3)")
FFN = _int(1, 2**22, "the widest published MLP is 73,728 (PaLM 540B)")
OPTIONAL_FFN = _int(0, 2**22, "0: the default width; the widest published MLP is 73,728 (PaLM 540B)")
VOCAB = _int(1, 2**24, "the largest published vocabulary is 262,144 tokens (Gemma 3)")
VOCAB_MULTIPLE = _int(0, 2**16, "a padding multiple (Megatron-LM's default 128); 0: no padding")
SEQUENCE = _int(1, 2**30, "the longest published context is 10M tokens (Llama 4 Scout)")
HEAD_DIM = _int(0, 2**16, "0: hidden_size / heads; the largest published head dimension is 256 (Gemma)")
WINDOW = _int(0, 2**30, "0: every layer attends to the whole sequence; gpt-oss's window is 128 tokens")
LORA_RANK = _int(0, 2**20, "MLA compression ranks (DeepSeek-V3: 1,536 and 512); 0: none")
EXPERTS = _int(0, 2**16, "0: dense; the most published experts per layer are 2,048 (Switch-C)")
TOP_K = _int(1, 2**10, "published routers send a token to at most 8 experts (DeepSeek-V3, Kimi K2)")
SHARED_EXPERTS = _int(0, 2**10, "published models use at most 2 shared experts (DeepSeek-V2)")
MTP_LAYERS = _int(0, 100, "DeepSeek-V3 trains 1 multi-token prediction module")
LOAD_FACTOR = Domain(lo=1.0, hi=float(2**16), why="a share of the mean load, at most num_experts / moe_top_k")
CAPACITY = Domain(lo=0.0, hi=float(2**16), lo_open=True, why="tokens an expert accepts per mean load (dropless: unset)")
PROBABILITY = Domain(lo=0.0, hi=1.0, hi_open=True, why="a probability: 0 switches dropout off")
CLAMP = Domain(lo=0.0, hi=1.0e6, why="an activation input limit: 0 switches the clamp off; gpt-oss clamps at 7")

# --- cluster/ (Llama 3 trained on 16,384 H100 with 8 per node, Dubey et al. 2024, Sec. 3.3.1; DGX-2 holds 16
# V100; the largest NVLink domain announced is NVL576)
GPUS_PER_NODE = _int(1, 1_024, "the most GPUs of one published host are 16 (DGX-2)")
NODES = _int(1, 2**22, "the largest published training run used 2,048 nodes (Llama 3, 16,384 H100)")
NVLINK_DOMAIN = _int(0, 2**16, "0: one node; the largest NVLink domain announced is 576 GPUs (NVL576)")
MAX_CLUSTER_GPUS = 2**22  # ~256x the 16,384 H100 of Llama 3 405B's run, the largest published
# --- parallelism/: a degree never exceeds the GPUs; a split never exceeds the layers
DEGREE = _int(1, MAX_CLUSTER_GPUS, "a degree of parallelism is at most the GPUs of a plausible cluster")
OPTIONAL_DEGREE = _int(0, MAX_CLUSTER_GPUS, "0: the default; at most the GPUs of a plausible cluster")
CHUNKS = _int(1, 10_000, "model chunks per stage hold at least one layer each (126 published, Llama 3 405B)")
BUCKET_MIB = Domain(lo=0.1, hi=float(2**20), why="a gradient bucket of 0.1 MiB to 1 TiB (Megatron's is ~150 MiB)")
ZERO_STAGE = _int(0, 3, "ZeRO defines stages 0-3 (Rajbhandari et al. 2020)")
# --- training/ (DeepSeek-V3: 15,360 sequences per batch; Llama 3: 16M tokens per batch and 15.6T tokens;
# Qwen3: 36T tokens, Yang et al. 2025)
BATCH = _int(1, 2**24, "the largest published batch is 15,360 sequences (DeepSeek-V3)")
MICRO_BATCH = _int(1, 2**24, "a micro-batch is at most the batch (15,360 sequences published, DeepSeek-V3)")
MAX_BATCH_TOKENS = 2**34  # tokens per batch: ~1,000x the 16M-token batch of Llama 3 405B
TOKENS = Domain(lo=0.0, hi=1.0e16, lo_open=True, why="the most tokens published for one run are 36T (Qwen3)")
# --- pricing/ (AWS p5.48xlarge on demand, 2023: $98.32 an hour for 8 H100, $12.29 a GPU-hour; US grid
# emissions: EIA 2022, 0.39 kg/kWh, coal ~1 kg/kWh)
USD_PER_GPU_HOUR = Domain(lo=0.0, hi=1.0e3, why="list prices are at most ~$12 a GPU-hour (AWS p5, H100)")
USD_PER_KWH = Domain(lo=0.0, hi=1.0e2, why="electricity costs well under $1 a kWh")
KG_CO2_PER_KWH = Domain(lo=0.0, hi=10.0, why="a coal plant emits about 1 kg CO2 a kWh")
WEIGHT_BYTES_PER_PARAM = 2  # bf16 weights alone: a model that does not hold them in all the cluster's HBM cannot run
