"""argparse for the scripts (bench/, sweeps/, python -m vtrain.profiler.*): a bad argument is one line.

argparse prints its usage block and then the error; the project's rule is one line naming the argument and
the rule, exit status 2 (``--help`` still prints the whole usage).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, NoReturn


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (the error names the rule; argparse names the argument)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be >= {low}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def new_file(text: str) -> Path:
    """An argparse ``type``: a file to write, in a folder that exists (checked before any work is done)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {path.parent} does not exist")
    return path
