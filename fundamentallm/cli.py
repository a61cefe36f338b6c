"""The command line's shared, torch-free parts: its error, its help formatter and its argument types.

``python -m fundamentallm`` (``__main__.py``), the post-training commands (``posttrain_cli.py``)
and the scripts in ``benchmarks/`` read their argument types from here, so that a bad value is
reported by argparse, before anything runs, in the same words everywhere. Importing this module
imports no PyTorch: ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import math


class CommandError(Exception):
    """A failure with a message for the user and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every option's default and keeps the epilog's line breaks."""


def _number(text: str, kind, low, low_ok: bool, high=None, high_ok: bool = False):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    bounds = f"{'>=' if low_ok else '>'} {low}" + (f" and {'<=' if high_ok else '<'} {high}" if high is not None else "")
    if not math.isfinite(value) or not (value >= low if low_ok else value > low) or (
            high is not None and not (value <= high if high_ok else value < high)):
        raise argparse.ArgumentTypeError(f"{text} must be {'an integer' if kind is int else 'a finite number'} {bounds}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, 1, True)


def nonneg_int(text: str) -> int:
    return _number(text, int, 0, True)


def positive_float(text: str) -> float:
    return _number(text, float, 0, False)


def nonneg_float(text: str) -> float:
    return _number(text, float, 0, True)


def fraction(text: str) -> float:
    return _number(text, float, 0, False, 1, False)


def probability(text: str) -> float:
    return _number(text, float, 0, False, 1, True)


def dropout_rate(text: str) -> float:
    return _number(text, float, 0, True, 1, False)
