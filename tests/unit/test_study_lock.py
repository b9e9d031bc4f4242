"""The study lock of journal storages survives a holder killed with -9 (no stale lock, no spinning).

No sleep stands in for synchronisation: the holder says on a pipe when it holds the lock, and the kernel's lock
table (/proc/locks, Linux: a blocked request is listed with "->" and its pid) says when the second taker is
waiting on it; only then is exclusivity checked."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vtrain.search.storage import StorageSpec, study_lock

HOLD = """
import sys
from vtrain.search.storage import StorageSpec, study_lock
with study_lock(StorageSpec("journal", sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()  # held until the test closes the pipe (or kills this process)
"""
LOCKS = Path("/proc/locks")


def blocked_waiters(pid: int) -> int:
    """Lock requests of ``pid`` the kernel has queued behind another holder."""
    return sum(1 for line in LOCKS.read_text().splitlines() if "->" in line and str(pid) in line.split())


def wait_until_blocked(pid: int, deadline_s: float = 10.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:  # polls the kernel's state: the condition, not a guessed delay
        if blocked_waiters(pid):
            return True
        threading.Event().wait(0.005)
    return False


def holder_and_waiter(tmp_path):
    """A process that holds the journal's lock, and a thread of this process queued behind it in the kernel;
    (holder, the thread's "got it" event, the thread)."""
    journal = str(tmp_path / "study.journal")
    p = subprocess.Popen([sys.executable, "-c", HOLD, journal], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    got = threading.Event()

    def take() -> None:
        with study_lock(StorageSpec("journal", journal)):
            got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    assert wait_until_blocked(os.getpid()), "the second taker waits in the kernel while the holder lives"
    assert not got.is_set(), "the lock is exclusive while its holder lives"
    return p, got, t


@pytest.mark.skipif(not LOCKS.exists(), reason="needs Linux's /proc/locks")
def test_lock_held_by_a_killed_worker_is_free_at_once(tmp_path):
    p, got, t = holder_and_waiter(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert got.wait(10.0), "the lock of a killed holder is released by the kernel"
    t.join(10.0)
    assert blocked_waiters(os.getpid()) == 0


@pytest.mark.skipif(not LOCKS.exists(), reason="needs Linux's /proc/locks")
def test_lock_released_by_a_live_holder_passes_to_the_waiter(tmp_path):
    p, got, _ = holder_and_waiter(tmp_path)
    assert p.stdin is not None
    p.stdin.close()  # the holder leaves its with-block
    assert p.wait(10.0) == 0
    assert got.wait(10.0)
