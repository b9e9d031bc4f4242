"""Multirun bookkeeping. Each job records its status and headline metrics in a small JSON file under
``<sweep dir>/.jobs/`` (written by the job's own process, so it works with every launcher: in-process,
local submitit processes, SLURM); at the end the launching process (the ``SweepSummary`` callback)
collects them into ``sweep_summary.csv``, one row per job, and prints the best plan of each job."""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from vtrain.io.jsonio import write_json
from vtrain.io.tables import write_csv

JOBS_DIR = ".jobs"
SUMMARY = "sweep_summary.csv"
_notes: Dict[str, Any] = {}
exit_code = 0  # set by summarise(): 1 when a job crashed, else 2 when one had bad input, else 0


def note(**metrics: Any) -> None:
    """A task's headline numbers for the sweep summary (``best``: a one-line description of its best
    plan; numeric metrics become columns)."""
    _notes.update(metrics)


def take_notes() -> Dict[str, Any]:
    out = dict(_notes)
    _notes.clear()
    return out


@dataclass
class JobRecord:
    num: int
    overrides: List[str]
    status: str  # ok | error (bad input) | crash (an unexpected exception)
    run_dir: str
    error: str = ""
    metrics: Dict[str, Any] = field(default_factory=dict)


def record_job(sweep_dir: Path, rec: JobRecord) -> Path:
    folder = sweep_dir / JOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return write_json(folder / f"{rec.num}.json", asdict(rec))


def read_jobs(sweep_dir: Path) -> List[JobRecord]:
    out = []
    for p in (sweep_dir / JOBS_DIR).glob("*.json"):
        try:
            out.append(JobRecord(**json.loads(p.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(out, key=lambda r: r.num)


def rows(jobs: List[JobRecord]) -> List[Dict[str, Any]]:
    out = []
    for j in jobs:
        row: Dict[str, Any] = {"job": j.num, "status": j.status, "overrides": " ".join(j.overrides),
                               "error": j.error, "run_dir": j.run_dir}
        row.update({k: v for k, v in j.metrics.items() if isinstance(v, (int, float, str, bool)) or v is None})
        out.append(row)
    return out


def _best(jobs: List[JobRecord], keys: Tuple[str, ...]) -> Optional[JobRecord]:
    """The job with the smallest value of the first of ``keys`` it has (a fitting plan only)."""
    def value(j: JobRecord) -> Optional[float]:
        v = next((j.metrics[k] for k in keys if k in j.metrics), None)
        ok = j.status == "ok" and j.metrics.get("fits", True) and isinstance(v, (int, float))
        return float(v) if ok and math.isfinite(v) else None  # type: ignore[arg-type]

    scored = [(v, j.num, j) for j in jobs if (v := value(j)) is not None]
    return min(scored)[2] if scored else None


def _swept(jobs: List[JobRecord]) -> Dict[int, str]:
    """Each job's overrides without those all jobs share (what the sweep varies)."""
    common = set.intersection(*(set(j.overrides) for j in jobs)) if jobs else set()
    return {j.num: " ".join(o for o in j.overrides if o not in common) or "(no overrides)" for j in jobs}


def render(jobs: List[JobRecord]) -> str:
    swept = _swept(jobs)
    lines = [f"sweep: {len(jobs)} jobs, {sum(j.status == 'ok' for j in jobs)} ok, "
             f"{sum(j.status == 'error' for j in jobs)} bad input, {sum(j.status == 'crash' for j in jobs)} crashed"]
    for j in jobs:
        what = j.metrics.get("best", "") if j.status == "ok" else f"{j.status}: {j.error}"
        lines.append(f"  #{j.num} {swept[j.num]}: {what}")
    ranks = ((("days_to_train", "fastest_days"), "fastest"), (("cost_usd", "cheapest_cost_usd"), "cheapest"))
    for keys, title in ranks:
        b = _best(jobs, keys)
        if b is not None:
            lines.append(f"{title} job: #{b.num} ({swept[b.num]})")
    return "\n".join(lines)


def summarise(sweep_dir: Path) -> Optional[str]:
    """Write ``sweep_summary.csv`` from the job records and return the text to print (None when no job
    left a record); sets :data:`exit_code`."""
    global exit_code
    jobs = read_jobs(sweep_dir)
    if not jobs:
        return None
    write_csv(sweep_dir / SUMMARY, rows(jobs), float_digits=6)
    shutil.rmtree(sweep_dir / JOBS_DIR, ignore_errors=True)
    statuses = {j.status for j in jobs}
    exit_code = 1 if "crash" in statuses else (2 if "error" in statuses else 0)
    return render(jobs) + f"\nwrote {sweep_dir / SUMMARY}"
