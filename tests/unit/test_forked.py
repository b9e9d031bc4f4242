"""vtrain.search.forked: a function in a forked process, its error re-raised at join."""
from __future__ import annotations

import pytest

from vtrain.errors import ConfigError
from vtrain.search.forked import Forked


def _write(path, text):
    path.write_text(text)


def _fail(message):
    raise ConfigError(message)


def test_the_function_runs_and_join_waits_for_it(tmp_path):
    job = Forked(_write, tmp_path / "out.txt", "done")
    job.join()
    assert (tmp_path / "out.txt").read_text() == "done"


def test_its_error_is_raised_at_join():
    job = Forked(_fail, "search.x: bad")
    with pytest.raises(ConfigError, match="search.x: bad"):
        job.join()
