"""Helpers for command-line parsing, shared by the kernel's CLI and plugin commands."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tempfile


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


def subcommands(subparsers, name, dest, **parser_kwargs):
    """``(parser, its sub-command collection)`` for ``astra NAME SUBCOMMAND``, created on first use.

    Several plugins may add sub-commands to one group (``astra workload llm`` comes from one plugin,
    ``astra workload systolic`` from another); each calls this with the same ``name`` and gets the same
    collection, whichever plugin registers first. Without a sub-command the group prints its help."""
    parser = subparsers.choices.get(name)
    if parser is None:
        parser = subparsers.add_parser(name, **parser_kwargs)

        def usage(args, parser=parser):
            parser.print_help()
            return 2

        parser.set_defaults(run_command=usage)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return parser, action
    return parser, parser.add_subparsers(dest=dest, metavar="SUBCOMMAND")


def ensure_parent_dir(path):
    """Create the folder ``path`` goes into, as every ``-o``/``--report-json`` does; a
    ConfigError names the folder when it cannot be made."""
    from astra_sim.errors import ConfigError

    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {parent}: {exc.strerror or exc}") from None


def write_text_atomic(path, text):
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path, data):
    """Write ``data`` to ``path`` whole (:func:`atomic_output`), creating the folder if needed."""
    ensure_parent_dir(path)
    with atomic_output(path) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_output(path):
    """A binary file to write ``path`` through: a temporary file in the same folder, renamed over ``path``
    when the ``with`` block ends without an error (removed otherwise). Readers see the old file or the
    whole new one, never a part; a killed writer leaves no half-written file. The one place every output
    file is written from (reports, traces, timelines streamed piece by piece, plots). The file gets the
    permissions ``open()`` would give it (``mkstemp`` makes 0600)."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(os.fspath(path)))
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
