"""The study lock of journal storages survives a holder killed with -9 (no stale lock, no spinning)."""
import os
import signal
import subprocess
import sys
import threading
import time

from vtrain.search.storage import StorageSpec, study_lock

HOLD = """
import sys, time
from vtrain.search.storage import StorageSpec, study_lock
with study_lock(StorageSpec("journal", sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_lock_held_by_a_killed_worker_is_free_at_once(tmp_path):
    journal = str(tmp_path / "study.journal")
    p = subprocess.Popen([sys.executable, "-c", HOLD, journal], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    got = threading.Event()

    def take() -> None:
        with study_lock(StorageSpec("journal", journal)):
            got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    time.sleep(0.3)
    assert not got.is_set(), "the lock is exclusive while its holder lives"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert got.wait(10.0), "the lock of a killed holder is released by the kernel"
