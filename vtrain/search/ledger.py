"""The shared record of a study's plans: which trial claimed which plan, whose trials are alive, and
whether a trial is within the study's budget. Read from the trials themselves, so every worker of the
study (local processes, SLURM jobs) sees the same record.

- Claim: before simulating, a trial stores its canonical plan key in the user attr ``vtrain.plan``
  (under :func:`vtrain.search.storage.study_lock`); a plan already claimed by another non-FAIL trial is
  not simulated again: the trial takes that trial's result (``duplicate_of``).
- Worker: each trial stores ``vtrain.worker`` = host, process id and since when, in the same hold of the
  study lock that created it, so that a worker on the same host can tell a trial of a killed process (its
  process is gone) from a live one at once (:func:`abandoned`); such a trial is taken over, not failed.
- Budget: a worker asks for a trial only while fewer than ``n_trials`` trials are finished or in flight,
  under the study lock (:mod:`vtrain.search.loop`). Without a lock (a database server), a trial is within
  ``search.n_trials`` iff fewer than ``n_trials`` counted trials have a smaller number (trial numbers are
  assigned atomically by the storage); one past it ends PRUNED with ``vtrain.over_budget`` and its reason,
  and is counted nowhere.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import time
from typing import Any, Dict, Optional, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from vtrain.search.plans import SEARCHED_FIELDS
from vtrain.workload.plan import ParallelPlan

CLAIM = "vtrain.plan"
WORKER = "vtrain.worker"
SLOT = "vtrain.slot"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Without the study lock (a database server), a trial without a worker attr may be a live worker's between
# Optuna's ask and its attr: three workers on one journal file back off on its lock up to 1 s a try (Optuna's
# JournalFileOpenLock), and on a loaded 2-core machine a live worker's first attr came later than 5 s (CI, stop
# 28: its trial was failed under it). Only a worker that dies mid-run leaves such orphans.
LIVE_ORPHAN_GRACE_S = 60.0


# searched fields added after studies had been stored, left out of the key at their default: a plan's claim
# (and its place in NSGA-II's plan order, vtrain.search.operators.in_plan_order) stays what it was, so a
# stored study resumes with its claims and the default search draws the plans it drew before
QUIET_AT_DEFAULT = {f.name: str(f.default).lower() for f in dataclasses.fields(ParallelPlan)
                    if f.name in ("cp_comm", "recompute_num_layers", "fsdp_shard_size", "reshard_after_forward")}


def key_text(fields: Dict[str, Any]) -> str:
    """Canonical text of a plan's searched fields (the claim key)."""
    return ",".join(f"{k}={str(fields[k]).lower()}" for k in SEARCHED_FIELDS
                    if k in fields and QUIET_AT_DEFAULT.get(k) != str(fields[k]).lower())


def me() -> Dict[str, Any]:
    """The worker record of a trial: host, process id, and when this process took the trial (epoch s)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_here(t: FrozenTrial) -> bool:
    """A RUNNING trial of a process on this host that no longer exists (killed)."""
    w = t.user_attrs.get(WORKER) or {}
    mine = me()
    return (t.state == TrialState.RUNNING and w.get("host") == mine["host"] and isinstance(w.get("pid"), int)
            and w["pid"] != mine["pid"] and not _pid_alive(w["pid"]))


def age_s(t: FrozenTrial) -> float:
    """Seconds since the trial started (inf if it has no start time)."""
    if t.datetime_start is None:
        return float("inf")
    start = t.datetime_start
    now = datetime.datetime.now(start.tzinfo) if start.tzinfo is not None else datetime.datetime.now()
    return (now - start).total_seconds()


def held_s(t: FrozenTrial) -> float:
    """Seconds since the trial's present worker took it (a trial taken over from a dead worker counts from
    the takeover, not from its start)."""
    since = (t.user_attrs.get(WORKER) or {}).get("since")
    return time.time() - float(since) if isinstance(since, (int, float)) else age_s(t)


def abandoned(t: FrozenTrial, locked: bool, stale_s: float) -> bool:
    """A RUNNING trial whose worker is gone: a process of this host that no longer exists; a trial without a
    worker record, seen under the study lock (every worker asks for its trial and records itself in one hold
    of that lock, so its creator died in between), or without the lock after ``LIVE_ORPHAN_GRACE_S``; or a
    trial held longer than ``stale_s`` (another host's worker that stopped: trials take milliseconds)."""
    if t.state != TrialState.RUNNING:
        return False
    if WORKER not in t.user_attrs:
        return locked or age_s(t) > LIVE_ORPHAN_GRACE_S
    return dead_here(t) or held_s(t) > stale_s


def others_running(trials: Sequence[FrozenTrial], number: Optional[int], locked: bool, stale_s: float) -> bool:
    """Another live worker has a trial in flight: a RUNNING trial other than ``number`` that is not
    :func:`abandoned` (the test a worker takes trials over by, so that a trial it is about to take over, or
    will take next, never counts as a live worker's)."""
    return any(t.state == TrialState.RUNNING and t.number != number and not abandoned(t, locked, stale_s)
               for t in trials)


OVER_BUDGET = "vtrain.over_budget"


def counted(t: FrozenTrial) -> bool:
    """A trial that takes a place in the budget: not FAIL, not PRUNED for being over it."""
    return t.state != TrialState.FAIL and not t.user_attrs.get(OVER_BUDGET)


def in_budget(study: optuna.Study, number: int, n_trials: int) -> bool:
    ahead = sum(1 for t in study.get_trials(deepcopy=False) if t.number < number and counted(t))
    return ahead < n_trials


def finished_count(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False, states=FINISHED) if counted(t))


class Ledger:
    """Plan key -> the smallest non-FAIL trial number that claimed it, and the finished trials by number."""

    def __init__(self) -> None:
        self.claims: Dict[str, int] = {}
        self.trials: Dict[int, FrozenTrial] = {}

    def refresh(self, study: optuna.Study) -> None:
        claims: Dict[str, int] = {}
        trials: Dict[int, FrozenTrial] = {}
        for t in study.get_trials(deepcopy=False):
            if t.state == TrialState.FAIL:
                continue
            trials[t.number] = t
            key = t.user_attrs.get(CLAIM)
            if key is not None and key not in claims:
                claims[key] = t.number
        self.claims, self.trials = claims, trials

    def owner(self, key: str) -> Optional[int]:
        return self.claims.get(key)

    def claimed(self, key: str) -> bool:
        return key in self.claims
