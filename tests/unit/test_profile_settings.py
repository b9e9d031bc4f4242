"""task=profile and task=measure check every profile.* value first: one line naming it, exit 2, nothing written
(before, profile.hidden_sizes=[0] divided by zero and profile.seq_lens=[-1] asked torch for a negative size)."""
from __future__ import annotations

import pytest

from tests.clirun import run_inprocess
from tests.sampling import fast_every


@pytest.mark.parametrize("task", ["profile", "measure"])
@pytest.mark.parametrize("override, says", fast_every(4, [
    ("profile.hidden_sizes=[0]", "profile.hidden_sizes=[0]: must be a list of integers from 1"),
    ("profile.seq_lens=[-1]", "profile.seq_lens=[-1]: must be a non-empty list"),
    ("profile.micro_batch_sizes=[]", "profile.micro_batch_sizes=[]: must be a non-empty list"),
    ("profile.tp_shards=[0]", "profile.tp_shards=[0]"),
    ("profile.repeats=0", "profile.repeats=0: must be an integer from 1"),
    ("profile.warmup=-1", "profile.warmup=-1"),
    ("profile.adam_layers=[0]", "profile.adam_layers=[0]"),
    ("profile.max_tensor_gib=0", "profile.max_tensor_gib=0.0"),
    ("profile.threads=-1", "profile.threads=-1"),
    ("profile.grad_accum_steps=0", "profile.grad_accum_steps=0"),
    ("profile.attention=[sdpa]", "profile.attention=[sdpa]: must be a non-empty list of flash, unfused"),
]))
def test_a_bad_profile_value_is_one_line(tmp_path, capfd, task, override, says):
    out = tmp_path / "prof"
    res = run_inprocess([f"task={task}", "+model=tiny", "+cluster=local_cpu", f"profile.out_dir={out}", override,
                         "tracking=off", f"hydra.run.dir={tmp_path / 'run'}"], capfd)
    assert res.code == 2, res.err
    assert says in res.one_line_error()
    assert not out.exists()


def test_a_hidden_size_off_the_head_size_is_one_line(tmp_path, capfd):
    res = run_inprocess(["task=profile", "+model=tiny", "+cluster=local_cpu", f"profile.out_dir={tmp_path / 'p'}",
                         "profile.hidden_sizes=[100]", f"hydra.run.dir={tmp_path / 'run'}"], capfd)
    assert res.code == 2 and "profile.hidden_sizes: 100 is not a multiple of model tiny's head size 32" in \
        res.one_line_error()
