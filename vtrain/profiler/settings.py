"""The domain of every ``profile.*`` field (``task=profile`` and ``task=measure``), checked before torch is
imported: a bad value is one line naming the field and the rule, not a traceback from inside a sweep
(``profile.hidden_sizes=[0]`` divided by zero, ``profile.seq_lens=[-1]`` made a tensor of negative size)."""
from __future__ import annotations

from typing import Any, List, Optional

from vtrain.config.rules import Rule, check_group, int_in, list_of, num_in, one_of
from vtrain.errors import ConfigError
from vtrain.workload.model import ModelSpec

_SIZE = int_in(1, 1 << 20)  # a sweep point's size: 1 .. 2^20 (a hidden size, a sequence, a batch)

PROFILE_RULES: List[Rule] = [
    ("micro_batch_sizes", list_of(_SIZE), "must be a non-empty list of integers from 1 to 1048576"),
    ("seq_lens", list_of(_SIZE), "must be a non-empty list of integers from 1 to 1048576"),
    ("hidden_sizes", list_of(_SIZE, empty=True),
     "must be a list of integers from 1 to 1048576 (empty: model.hidden_size)"),
    ("tp_shards", list_of(int_in(1, 1024)), "must be a non-empty list of integers from 1 to 1024"),
    ("attention", list_of(one_of(("flash", "unfused"))), "must be a non-empty list of flash, unfused"),
    ("adam_layers", list_of(int_in(1, 100_000), empty=True),
     "must be a list of layer counts from 1 to 100000 (empty: 1 and the model's)"),
    ("max_tensor_gib", num_in(0.0, 1e6, lo_open=True), "must be a number of GiB in (0, 1000000]"),
    ("warmup", int_in(0, 10_000), "must be an integer from 0 to 10000"),
    ("repeats", int_in(1, 10_000), "must be an integer from 1 to 10000"),
    ("min_sample_s", num_in(0.0, 3600.0), "must be a number of seconds from 0 to 3600"),
    ("cpu_clock", one_of(("cpu", "wall")), "must be one of cpu, wall"),
    ("threads", int_in(0, 1024), "must be an integer from 0 (torch's default) to 1024"),
    ("collective_max_mib", int_in(1, 1 << 20), "must be an integer number of MiB from 1 to 1048576"),
    ("measure_iterations", int_in(1, 10_000), "must be an integer from 1 to 10000"),
    ("grad_accum_steps", int_in(1, 100_000), "must be an integer from 1 to 100000"),
]


def check_profile(profile: Any, model: Optional[ModelSpec] = None) -> None:
    """Every rule of :data:`PROFILE_RULES`; with the ``model``, its hidden sizes too (the sweep scales the model
    keeping its head size: :func:`vtrain.profiler.sweep.scaled_model`), before any point is timed."""
    check_group("profile", profile, PROFILE_RULES)
    if model is None:
        return
    for hidden in profile.hidden_sizes:
        if int(hidden) % model.head_dim:
            raise ConfigError(f"profile.hidden_sizes: {hidden} is not a multiple of model {model.name}'s head size "
                              f"{model.head_dim}")
