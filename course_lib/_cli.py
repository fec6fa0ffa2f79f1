"""The argument parser of the course's command lines."""

from __future__ import annotations

import argparse

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument ends with one line, ``PROG: error: MESSAGE`` (no usage block),
    and exit status 2: the rule every command line of the course follows."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")
