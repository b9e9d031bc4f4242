"""The MLflow logger processes (a search's and a simulation's) end when the process that started them is
killed with -9: no logger is left holding the store open (issue 41)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

# starts a simulation's MLflow logger (it waits for the report, which never comes) and prints its pid
PARENT = """
import threading
from vtrain.tracking.simulate_run import SimulationLogger

logger = SimulationLogger(None)
print(logger.proc.pid if logger.proc is not None else -1, flush=True)
threading.Event().wait()
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (ended, not yet reaped by init) counts as gone
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
                    reason="the logger is forked on Linux with more than one CPU")
def test_simulation_logger_ends_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert child > 0 and alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    end = time.monotonic() + 20.0
    while alive(child) and time.monotonic() < end:  # polls the condition, not a guessed delay
        threading.Event().wait(0.01)
    assert not alive(child), "the logger outlived its killed parent"
