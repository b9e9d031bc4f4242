"""Run the vtrain command line in this process (fast: no interpreter start-up, no Hydra import per
case) or as a real subprocess, and look at what it printed."""
from __future__ import annotations

import csv
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> List[str]:
        return [ln for ln in self.err.strip().splitlines() if ln.strip()]

    def one_line_error(self) -> str:
        """The single ``vtrain: error:`` line of a rejected input (asserts there is exactly one)."""
        assert self.code == 2, (self.code, self.err[-2000:])
        assert "Traceback" not in self.err + self.out, self.err[-2000:]
        assert len(self.err_lines) == 1, self.err
        assert self.err_lines[0].startswith("vtrain: error: "), self.err
        return self.err_lines[0]


def run_inprocess(args: Sequence[str], capfd) -> CliResult:
    """``python -m vtrain <args>`` as a call of :func:`vtrain.cli.main.main` (pytest's ``capfd``)."""
    from vtrain.cli.main import main

    capfd.readouterr()
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    captured = capfd.readouterr()
    return CliResult(code, captured.out, captured.err)


def validate_table(text: str, tmp_path: Path, capfd, cluster: str = "h100x1024"
                   ) -> Tuple[CliResult, List[Dict[str, str]]]:
    """``task=validate`` in this process on a measured table written from ``text``: what it printed and the
    rows of its validation.csv (none when it failed)."""
    data, run = tmp_path / "measured.csv", tmp_path / "run"
    data.write_text(text)
    res = run_inprocess(["task=validate", f"+cluster={cluster}", f"validate.data={data}", "validate.show_rows=0",
                         f"hydra.run.dir={run}"], capfd)
    out = run / "validation.csv"
    return res, list(csv.DictReader(out.open())) if res.code == 0 and out.exists() else []


def run_subprocess(args: Sequence[str], cwd: Path, timeout: float = 120) -> CliResult:
    p = subprocess.run([sys.executable, "-m", "vtrain", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    return CliResult(p.returncode, p.stdout, p.stderr)


def run_main_inprocess(main, argv: Sequence[str], capfd) -> CliResult:
    """A script's ``main(argv)`` called in this process, as ``sys.exit(main(sys.argv[1:]))`` runs it: the exit code
    (argparse's ``SystemExit`` or the returned code) and what it printed."""
    capfd.readouterr()
    try:
        code = int(main(list(argv)) or 0)
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    captured = capfd.readouterr()
    return CliResult(code, captured.out, captured.err)
