"""What makes a resumed study follow an uninterrupted one: torn journal records are mended, orphaned
trials (killed before their worker attr) are failed, and populations and fronts do not depend on the order
trials finished in."""
from __future__ import annotations

import itertools
import json
import random

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import create_trial

from vtrain.search import ledger as lg
from vtrain.search.journal_repair import mend_torn_records
from vtrain.search.operators import FeasibleChildren, in_plan_order
from vtrain.search.pareto import pareto_front
from vtrain.search.storage import StorageSpec, make_storage


def _journal_with_trials(path, n=3):
    study = optuna.create_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))),
                                directions=["minimize", "minimize"])
    for i in range(n):
        study.add_trial(create_trial(values=[float(i), float(n - i)], params={"x": i},
                                     distributions={"x": optuna.distributions.IntDistribution(0, 9)}))
    return study


def test_a_torn_tail_is_cut_and_kept_aside(tmp_path):
    path = tmp_path / "study.journal"
    _journal_with_trials(path)
    whole = path.read_bytes()
    torn = b'{"op_code":6,"worker_id":"w","trial_id":2,"sta'
    path.write_bytes(whole + torn)
    notes = mend_torn_records(path)
    assert len(notes) == 1 and "end of" in notes[0]
    assert path.read_bytes() == whole
    assert (tmp_path / "study.journal.torn").read_bytes() == torn + b"\n"


def test_a_torn_record_followed_by_a_whole_one_is_blanked_in_place(tmp_path):
    path = tmp_path / "study.journal"
    _journal_with_trials(path, n=2)
    lines = path.read_bytes().splitlines(keepends=True)
    torn = b'{"op_code":8,"worker_id":"w","trial_id":1,"user_attr":{"result":{"pl'
    broken = b"".join(lines[:-1]) + torn + lines[-1]  # the next worker appended onto the torn line
    path.write_bytes(broken)
    with pytest.raises(ValueError):
        [json.loads(line) for line in broken.splitlines()]
    notes = mend_torn_records(path)
    assert len(notes) == 1 and "line" in notes[0]
    mended = path.read_bytes()
    assert len(mended) == len(broken), "byte offsets that live workers cache stay valid"
    assert [json.loads(line) for line in mended.splitlines()] == [json.loads(line) for line in lines]
    study = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
    assert len(study.trials) == 2


def test_a_whole_journal_is_left_alone(tmp_path):
    path = tmp_path / "study.journal"
    _journal_with_trials(path)
    before = path.read_bytes()
    assert mend_torn_records(path) == []
    assert path.read_bytes() == before
    assert not (tmp_path / "study.journal.torn").exists()


def test_make_storage_mends_before_optuna_reads(tmp_path):
    path = tmp_path / "study.journal"
    _journal_with_trials(path)
    path.write_bytes(path.read_bytes() + b'{"op_code":4,"work')
    storage = make_storage(StorageSpec("journal", str(path)))
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.values for t in study.trials] == [[0.0, 3.0], [1.0, 2.0], [2.0, 1.0]]


def test_a_trial_without_a_worker_record_is_abandoned_under_the_lock_only(tmp_path):
    study = optuna.create_study(storage=JournalStorage(JournalFileBackend(str(tmp_path / "j"))))
    study.ask()  # a process killed right after Optuna created its trial: no worker attr
    t = study.trials[0]
    # under the study lock a worker asks and records itself in one hold: no record there means its creator died
    assert lg.abandoned(t, locked=True, stale_s=600.0)
    assert not lg.others_running([t], None, locked=True, stale_s=600.0), "no live worker's, however young"
    assert not lg.abandoned(t, locked=False, stale_s=600.0), "without the lock: within its grace"
    assert lg.others_running([t], None, locked=False, stale_s=600.0), "without the lock: may be a live worker's"


def test_a_trial_with_a_live_worker_is_not_abandoned_until_stale(tmp_path):
    study = optuna.create_study(storage=JournalStorage(JournalFileBackend(str(tmp_path / "j"))))
    trial = study.ask()
    trial.set_user_attr(lg.WORKER, lg.me())
    t = study.trials[0]
    assert not lg.abandoned(t, locked=True, stale_s=600.0)  # our own live process
    assert lg.others_running([t], None, locked=True, stale_s=600.0), "a live worker's trial in flight"
    assert not lg.others_running([t], t.number, locked=True, stale_s=600.0), "the trial handed out is not another's"
    assert 0.0 <= lg.held_s(t) < 600.0
    assert lg.abandoned(t, locked=True, stale_s=-1.0), "held past search.stale_trial_s: another host's dead worker"
    trial.set_user_attr(lg.WORKER, {**lg.me(), "pid": 2**22 + 1})  # above Linux's pid_max: no such process
    assert lg.abandoned(study.trials[0], locked=True, stale_s=600.0), "a process of this host that is gone"


def _frozen(number, plan, values):
    return create_trial(values=list(values), params={"x": number},
                        distributions={"x": optuna.distributions.IntDistribution(0, 99)},
                        user_attrs={lg.CLAIM: plan})


def test_plan_order_does_not_depend_on_trial_numbers():
    plans = [("tp=1,pp=2", (3.0, 1.0)), ("tp=2,pp=1", (2.0, 2.0)), ("tp=4,pp=1", (1.0, 3.0))]
    orders = set()
    for perm in itertools.permutations(plans):
        trials = [_frozen(i, p, v) for i, (p, v) in enumerate(perm)]
        orders.add(tuple(t.user_attrs[lg.CLAIM] for t in in_plan_order(trials)))
    assert len(orders) == 1


def test_offspring_draws_do_not_depend_on_trial_numbers():
    study = optuna.create_study(directions=["minimize", "minimize"])
    space = {"x": optuna.distributions.IntDistribution(0, 99)}
    plans = [("a", (3.0, 1.0)), ("b", (2.0, 2.0)), ("c", (1.0, 3.0)), ("d", (2.5, 2.5))]
    children = set()
    for perm in itertools.permutations(plans):
        trials = []
        for i, (p, v) in enumerate(perm):
            t = _frozen(i, p, v)
            t.params = {"x": "abcd".index(p) * 10}
            trials.append(t)
        children.add(tuple(FeasibleChildren(lambda _: True, random.Random(7))(study, space, trials).items()))
    assert len(children) == 1


def test_equal_points_keep_the_same_plan_whatever_the_order():
    items = ["recompute=selective", "recompute=none", "recompute=full"]
    points = {"recompute=selective": (1.0, 2.0), "recompute=none": (1.0, 2.0), "recompute=full": (2.0, 1.0)}
    fronts = {tuple(pareto_front(list(p), [points[i] for i in p], list(p))) for p in itertools.permutations(items)}
    assert fronts == {("recompute=none", "recompute=full")}
