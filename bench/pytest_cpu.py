"""A pytest plugin that measures the CPU time of each test and of Hydra's composes (docs/testing.md, "Measured").

    PYTHONPATH=$PWD:bench CPU_DIR=/tmp/cpu python -m pytest -m "not slow" -n 2 --dist loadgroup -p pytest_cpu
    python bench/pytest_cpu.py /tmp/cpu        # totals, the costliest files and tests

Each process (the xdist controller and each worker) writes <CPU_DIR>/<worker>.tsv: per test, user+sys CPU of the
process and of its waited-for children (getrusage), and the CPU and count of Hydra composes
(``ConfigLoaderImpl.load_configuration``) inside it. CPU rather than wall time: the machine is shared.
"""
from __future__ import annotations

import collections
import glob
import os
import resource
import sys
import time
from typing import Any, Dict, Generator, List, Tuple

_rows: List[Tuple[str, float, float, float, int]] = []
_composes = [0.0, 0]  # CPU s, count


def _cpu() -> Tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _count_composes() -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    real = ConfigLoaderImpl.load_configuration

    def load_configuration(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return real(self, *args, **kwargs)
        finally:
            _composes[0] += time.process_time() - t0
            _composes[1] += 1

    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]


if "pytest" in sys.modules:
    import pytest

    _count_composes()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: Any, nextitem: Any) -> Generator[None, None, None]:
        (me0, kids0), hydra0, n0 = _cpu(), _composes[0], _composes[1]
        yield
        me1, kids1 = _cpu()
        _rows.append((item.nodeid, me1 + kids1 - me0 - kids0, kids1 - kids0, _composes[0] - hydra0,
                      int(_composes[1] - n0)))

    def pytest_unconfigure(config: Any) -> None:
        out = os.environ.get("CPU_DIR")
        if not out:
            return
        me, kids = _cpu()
        os.makedirs(out, exist_ok=True)  # (it failed at the session's end when the folder was missing)
        with open(os.path.join(out, os.environ.get("PYTEST_XDIST_WORKER", "main") + ".tsv"), "w") as f:
            f.write(f"#process\t{me + kids:.3f}\t{kids:.3f}\t{_composes[0]:.3f}\t{_composes[1]}\n")
            for row in _rows:
                f.write("\t".join(str(round(v, 4)) if isinstance(v, float) else str(v) for v in row) + "\n")


def summary(folder: str, top: int = 20) -> None:
    tests: List[Tuple[float, str]] = []
    by_file: Dict[str, float] = collections.defaultdict(float)
    hydra_s, hydra_n = 0.0, 0
    for path in glob.glob(os.path.join(folder, "gw*.tsv")) or glob.glob(os.path.join(folder, "main.tsv")):
        for line in open(path):
            name, test_s, _kids_s, h_s, h_n = line.rstrip("\n").split("\t")
            if name == "#process":
                hydra_s, hydra_n = hydra_s + float(h_s), hydra_n + int(h_n)
                continue
            tests.append((float(test_s), name))
            by_file[name.split("::")[0]] += float(test_s)
    total_s = sum(c for c, _ in tests)
    print(f"{len(tests)} tests, {total_s:.1f} s of CPU in tests; Hydra composes: {hydra_n}, {hydra_s:.1f} s")
    for file_name, file_s in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{file_s:7.1f} s  {file_name}")
    for one_s, test_name in sorted(tests, reverse=True)[:top]:
        print(f"{one_s:7.2f} s  {test_name}")


if __name__ == "__main__":
    summary(sys.argv[1])
