"""Helpers for command-line parsing, shared by the kernel's CLI and plugin commands."""

from __future__ import annotations

import argparse
import math


def number(kind=int, minimum=None, exclusive=False, what="a number"):
    """An argparse ``type``: ``kind(text)`` at least ``minimum`` (above it when ``exclusive``).

    ``what`` names the expected value in the error, e.g. ``number(int, 1, what="chunks")``.
    """
    bound = "" if minimum is None else (f" > {minimum}" if exclusive else f" >= {minimum}")

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}{bound}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected {what}{bound}, got {text!r}")
        if minimum is not None and (value <= minimum if exclusive else value < minimum):
            raise argparse.ArgumentTypeError(f"expected {what}{bound}, got {text!r}")
        return value

    return parse


positive_int = number(int, 1, what="a positive integer")
non_negative_int = number(int, 0, what="an integer")
non_negative_float = number(float, 0, what="a number")
positive_float = number(float, 0, exclusive=True, what="a number")
