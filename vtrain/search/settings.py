"""The domain of every ``search.*`` and ``tracking.*`` field, checked in one place before a search starts.

Each rule is data (field, predicate, rule text), so a bad value gives one line naming the field and the
rule, e.g. ``search.population_size=1: must be an integer >= 2``, raised as
:class:`vtrain.errors.ConfigError` (the CLI prints it and exits 2). No optuna or mlflow import.
"""
from __future__ import annotations

import math
import os
from typing import Any, List

from vtrain.config.rules import Rule, check_group
from vtrain.config.rules import boolean as _bool
from vtrain.config.rules import int_in as _int
from vtrain.config.rules import list_of as _list
from vtrain.config.rules import num_in as _num
from vtrain.config.rules import one_of as _one_of
from vtrain.config.rules import optional as _opt
from vtrain.config.rules import text as _text
from vtrain.errors import ConfigError

SAMPLERS = ("nsgaii", "tpe", "random", "grid")
CHILD_RUNS = ("front", "all", "none")
QUANTILES = ("mid", "hi")  # search.objective_quantile (vtrain/search/objective.py)
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zero_bubble", "zbv", "dualpipe", "dualpipev")  # workload.enums.Schedule
RECOMPUTE = ("none", "selective", "selective_op", "full")  # workload.enums.Recompute
PRECISIONS = ("fp16", "bf16", "fp32", "fp8", "fp8_rowwise", "fp8_blockwise", "mxfp8", "nvfp4")  # enums.Precision
DISPATCHERS = ("alltoall", "allgather", "deepep")  # workload.enums.MoeDispatcher
CP_COMMS = ("p2p", "allgather", "a2a")  # workload.enums.CpComm

INF = math.inf
# the tracking stores MLflow 3 opens (mlflow.tracking._tracking_service.utils): servers, databases (with a driver:
# "postgresql+psycopg2"), Databricks; a directory (its file store) only with MLFLOW_ALLOW_FILE_STORE=true
MLFLOW_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks", "databricks-uc", "uc")


def _tracking_uri(v: Any) -> bool:
    if v is None:
        return True
    if not isinstance(v, str) or not v.strip():
        return False
    scheme = v.split("://", 1)[0].split("+", 1)[0].lower() if "://" in v else v.strip().lower()
    if scheme in MLFLOW_SCHEMES:
        return True
    file_store = "://" not in v or scheme == "file"
    return file_store and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1")


SEARCH_RULES: List[Rule] = [
    ("sampler", _one_of(SAMPLERS), f"must be one of {', '.join(SAMPLERS)}"),
    ("n_trials", _int(0, 1_000_000), "must be an integer from 0 to 1000000 (>= 1 unless search.sampler=grid)"),
    ("seed", _int(0, 2**32 - 1), "must be an integer from 0 to 2**32-1"),
    ("objectives", _list(lambda x: isinstance(x, str)), "must be a non-empty list of Report fields"),
    ("objective_quantile", _one_of(QUANTILES), f"must be one of {', '.join(QUANTILES)}"),
    ("study_name", _text, "must be null or a non-empty name"),
    ("storage", _text, "must be null, a journal file path or an RDB URL such as sqlite:///study.db"),
    ("max_tp", _int(0), "must be an integer >= 0 (0: GPUs per node)"),
    ("allow_cross_node_tp", _bool, "must be true or false"),
    ("micro_batch_sizes", _list(_int(1, 65536)), "must be a non-empty list of integers from 1 to 65536"),
    ("schedules", _list(_one_of(SCHEDULES)), f"must be a non-empty list of {', '.join(SCHEDULES)}"),
    ("virtual_stages", _list(_int(1, 1024)), "must be a non-empty list of integers from 1 to 1024"),
    ("recompute", _list(_one_of(RECOMPUTE)), f"must be a non-empty list of {', '.join(RECOMPUTE)}"),
    ("sequence_parallel", _list(_bool), "must be a non-empty list of true/false"),
    ("distributed_optimizer", _list(_bool), "must be a non-empty list of true/false"),
    # issue 12: the modern-parallelism choice lists (null: the default stated in config/schema.py SearchConfig)
    ("pp", _opt(_list(_int(1, 65536))), "must be null (divisors of the layers) or a non-empty list of integers >= 1"),
    ("zero_stages", _opt(_list(_int(0, 3))), "must be null (from search.distributed_optimizer) or a list of 0..3"),
    ("cp", _list(_int(1, 65536)), "must be a non-empty list of integers >= 1"),
    ("precisions", _opt(_list(_one_of(PRECISIONS))), f"must be null (training.precision) or a list of "
     f"{', '.join(PRECISIONS)}"),
    ("ep", _opt(_list(_int(1, 65536))), "must be null (every valid degree) or a non-empty list of integers >= 1"),
    ("etp", _list(_int(0, 65536)), "must be a non-empty list of integers >= 0 (0: tp)"),
    ("moe_dispatchers", _opt(_list(_one_of(DISPATCHERS))), f"must be null (parallelism.moe_dispatcher) or a "
     f"list of {', '.join(DISPATCHERS)}"),
    ("cp_comms", _opt(_list(_one_of(CP_COMMS))), f"must be null (parallelism.cp_comm) or a list of "
     f"{', '.join(CP_COMMS)}"),
    ("recompute_num_layers", _list(_int(0, 65536)), "must be a non-empty list of integers >= 0 (with recompute="
     "full: the first layers of each model chunk that run again; 0: every layer)"),
    ("fsdp_shard_sizes", _opt(_list(_int(0, 65536))), "must be null (parallelism.fsdp_shard_size) or a non-empty "
     "list of integers >= 0 (hybrid sharding group sizes; 0: the whole DP group)"),
    ("reshard_after_forward", _opt(_list(_bool)), "must be null (parallelism.reshard_after_forward) or a non-empty "
     "list of true/false"),
    ("max_grid_plans", _int(0), "must be an integer >= 0 (0: no cap)"),
    ("gpus", _int(0), "must be an integer >= 0 (0: any GPU count)"),
    ("min_gpus", _int(1), "must be an integer >= 1"),
    ("max_gpus", _int(0), "must be an integer >= 0 (0: the cluster's GPUs)"),
    ("max_days", _opt(_num(0, INF, lo_open=True)), "must be null or a finite number of days > 0"),
    ("max_cost_usd", _opt(_num(0, INF, lo_open=True)), "must be null or a finite amount > 0"),
    ("max_memory_fraction", _num(0, 1, lo_open=True), "must be a number in (0, 1]"),
    ("min_mfu", _opt(_num(0, 1, lo_open=True)), "must be null or a fraction in (0, 1] (0.4 = 40%)"),
    ("population_size", _int(2, 100_000), "must be an integer from 2 to 100000"),
    ("mutation_prob", _opt(_num(0, 1)), "must be null or a probability in [0, 1]"),
    ("crossover_prob", _num(0, 1), "must be a probability in [0, 1]"),
    ("seed_population", _bool, "must be true or false"),
    ("local_search_fraction", _num(0, 1), "must be a fraction in [0, 1]"),
    ("local_search_rounds", _int(0, 1000), "must be an integer from 0 to 1000"),
    ("filter_offspring", _bool, "must be true or false"),
    ("heartbeat_s", _int(1, 3600), "must be an integer from 1 to 3600 seconds"),
    ("stale_trial_s", _num(1, 86400 * 7), "must be a number of seconds from 1 to 604800"),
    ("worker_index", _int(-1, 1_000_000), "must be -1 (derived) or an integer >= 0"),
    ("workers", _int(0, 1024), "must be an integer from 0 to 1024 (0: one per CPU)"),
    ("progress_bar", _bool, "must be true or false"),
    ("top_k_artifacts", _int(0, 10), "must be an integer from 0 to 10 (best plans with report and timeline)"),
]

TRACKING_RULES: List[Rule] = [
    ("enabled", _bool, "must be true or false"),
    ("uri", _tracking_uri, "must be null, an MLflow server (http://host:5000) or a database URL (sqlite:///<path>.db, "
                           "postgresql://...); MLflow 3 refuses a directory store unless MLFLOW_ALLOW_FILE_STORE=true"),
    ("experiment_name", _text, "must be null or a non-empty name"),
    ("child_runs", _one_of(CHILD_RUNS), f"must be one of {', '.join(CHILD_RUNS)}"),
    ("top_k", _int(0, 1000), "must be an integer from 0 to 1000"),
    ("max_child_runs", _int(0), "must be an integer >= 0"),
    ("http_timeout_s", _int(1, 3600), "must be an integer from 1 to 3600 seconds"),
    ("description", _text, "must be null or a non-empty text"),
]


def check_search(search: Any) -> None:
    """Every ``search.*`` field against its domain, then the rules that tie fields together."""
    check_group("search", search, SEARCH_RULES)
    if str(search.sampler) != "grid" and int(search.n_trials) < 1:
        raise ConfigError(f"search.n_trials={search.n_trials}: must be >= 1 with search.sampler={search.sampler}")
    gpus, lo, hi = int(search.gpus), int(search.min_gpus), int(search.max_gpus)
    if hi and lo > hi:
        raise ConfigError(f"search.min_gpus={lo}: must not exceed search.max_gpus={hi}")
    if gpus and (gpus < lo or (hi and gpus > hi)):
        raise ConfigError(f"search.gpus={gpus}: must lie within search.min_gpus={lo} and search.max_gpus={hi or 'any'}")


def check_tracking(tracking: Any) -> None:
    check_group("tracking", tracking, TRACKING_RULES)


def check_all(cfg: Any) -> None:
    check_search(cfg.search)
    tracking = cfg.get("tracking") if hasattr(cfg, "get") else None
    if tracking is not None:
        check_tracking(tracking)
