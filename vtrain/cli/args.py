"""argparse for the scripts (bench/, sweeps/, python -m vtrain.profiler.*): a bad argument is one line.

argparse prints its usage block and then the error; the project's rule is one line naming the argument and
the rule, exit status 2 (``--help`` still prints the whole usage).
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)
