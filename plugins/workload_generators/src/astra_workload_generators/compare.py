"""Structural comparison of two traces (ids may differ)."""

from __future__ import annotations

from .scale import _FIELDS, _read, canonical_nodes, rank_files

__all__ = ["compare_nodes", "compare_traces"]


def compare_nodes(a, b, *, names=True, drop_attrs=()):
    """The first difference between two node lists as a string, or None when they are the same graph."""
    ca = canonical_nodes(a, names=names, drop_attrs=drop_attrs)
    cb = canonical_nodes(b, names=names, drop_attrs=drop_attrs)
    if len(ca) != len(cb):
        return f"{len(ca)} nodes vs {len(cb)}"
    for pos, (x, y) in enumerate(zip(ca, cb)):
        if x != y:
            field = next(f for f, u, v in zip(_FIELDS, x, y) if u != v)
            i = _FIELDS.index(field)
            return (f"node #{pos} (id {a[pos].id} {a[pos].name!r} vs id {b[pos].id} {b[pos].name!r}): "
                    f"{field} {x[i]!r} vs {y[i]!r}")
    return None


def compare_traces(prefix_a, prefix_b, *, names=True, drop_attrs=()):
    """Compare every rank of two traces; returns a list of differences (empty when equal)."""
    paths_a = rank_files(prefix_a)
    paths_b = rank_files(prefix_b)
    out = []
    if len(paths_a) != len(paths_b):
        out.append(f"{len(paths_a)} rank files vs {len(paths_b)}")
    for pa, pb in zip(paths_a, paths_b):
        diff = compare_nodes(_read(pa)[1].nodes, _read(pb)[1].nodes, names=names, drop_attrs=drop_attrs)
        if diff:
            out.append(f"{pa} vs {pb}: {diff}")
    return out
