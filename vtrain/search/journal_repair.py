"""Mend a journal file that a worker killed mid-write left torn, before Optuna reads it.

Optuna's ``JournalFileBackend.append_logs`` writes one or more JSON records and a newline in one
``write``. A ``kill -9`` in the middle leaves a record without its newline at the end of the file; the next
worker's append then lands on the same line, and every later read fails on that line with a JSON error
(seen: resuming after a kill -9 0.2 s into a study gave "Expecting ',' delimiter: line 1 column 629").

The torn bytes are an operation that never happened (its writer died before finishing it), so:
- a torn tail (no final newline) is cut off at the last newline;
- a torn record already followed by a complete one on the same line is blanked with spaces, keeping the
  file's length and every byte offset (live workers cache record offsets), and JSON allows the leading
  whitespace.
Nothing is lost: the torn bytes are appended to ``<journal>.torn`` for inspection. Runs under Optuna's own
journal lock, so no live worker is mid-write.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List

RECORD_START = b'{"op_code":'


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _complete_suffix_at(line: bytes) -> int:
    """Offset in ``line`` where a complete record begins after a torn prefix, or -1."""
    at = line.rfind(RECORD_START)
    while at > 0:
        if _parses(line[at:]):
            return at
        at = line.rfind(RECORD_START, 0, at)
    return -1


def is_journal(path: Path) -> bool:
    """An empty file, or one whose first line begins with a journal record: the only files vtrain mends or
    appends to (a file of one's own named by mistake is left as it is)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    first = head.lstrip()
    return not first or first.startswith(RECORD_START)


def mend_torn_records(path: Path) -> List[str]:
    """Mend torn records in the journal at ``path`` (caller holds the journal lock); returns one line per
    repair, for the log."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    notes: List[str] = []
    torn: List[bytes] = []
    with open(path, "r+b") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            torn.append(data[end:])
            f.truncate(end)
            notes.append(f"cut a torn record of {len(data) - end} bytes off the end of {path}")
            data = data[:end]
        offset = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            if line.count(RECORD_START) > 1 and not _parses(line):  # a torn record plus a whole one
                at = _complete_suffix_at(line)
                if at > 0:
                    torn.append(line[:at])
                    f.seek(offset)
                    f.write(b" " * at)
                    notes.append(f"blanked a torn record of {at} bytes on line {number} of {path}")
            offset += len(line)
        f.flush()
        os.fsync(f.fileno())
    if torn:
        with open(path.with_name(path.name + ".torn"), "ab") as keep:
            keep.write(b"\n".join(torn) + b"\n")
    return notes
