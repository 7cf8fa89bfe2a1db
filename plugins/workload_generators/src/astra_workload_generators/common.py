"""Helpers shared by the generators: byte sizes, size labels, writing rank files."""

from __future__ import annotations

import contextlib
import os
import re

from astra_sim.chakra import ChakraError, write_et
from astra_sim.errors import ConfigError
from astra_sim.safeio import ensure_parent_dir as ensure_parent  # the folder a prefix's files go into

__all__ = ["parse_size", "size_label", "write_rank_files", "ensure_parent"]

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text, what="--size") -> int:
    """``'1MiB'`` -> 1048576. Units B, KiB/MiB/GiB/TiB and KB/MB/GB/TB, all powers of 1024 (the
    convention of ASTRA-sim's generator scripts, whose "1MB" is 2**20 bytes); a bare number is bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ConfigError(
                f"{what}: cannot read {text!r} as a byte size (examples: 1024, 64KiB, 1MiB, 1GB; "
                "KB/MB/GB are powers of 1024 as in ASTRA-sim)"
            )
        value = int(match.group(1)) * _UNITS[unit]
    if value < 0:
        raise ConfigError(f"{what}: a byte size cannot be negative, got {text!r}")
    return value


def size_label(size: int) -> str:
    """The size part of ASTRA-sim's microbenchmark names: 1024 -> '1KB', 2**20 -> '1MB', 2**30 -> '1GB'
    (exact multiples only; otherwise plain bytes, '1000003B')."""
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


def write_rank_files(prefix, metadata, nodes_per_rank) -> list:
    """Write ``<prefix>.<r>.et`` for every rank's node list; returns the paths."""
    ensure_parent(prefix)
    paths = []
    for rank, nodes in enumerate(nodes_per_rank):
        path = f"{prefix}.{rank}.et"
        meta = metadata[rank] if isinstance(metadata, (list, tuple)) else metadata
        try:
            write_et(path, meta, nodes)
        except ChakraError:  # a full disk: no partial set of rank files is left (the error's context: the OSError)
            for done in paths:
                with contextlib.suppress(OSError):
                    os.unlink(done)
            raise
        paths.append(path)
    return paths
