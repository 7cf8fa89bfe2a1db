"""Structural comparison of two traces (ids may differ): every difference, counted by kind.

Nodes are compared by position in their files. When the two files hold different numbers of nodes, the nodes are
first aligned on their (type, name) sequence (a longest-matching-blocks alignment), so that one extra or missing
node shows as that, not as a difference at every later position; dependencies are then compared through the
alignment.
"""

from __future__ import annotations

import difflib

from .scale import _FIELDS, _read, canonical_nodes, rank_files

__all__ = ["compare_nodes", "compare_traces", "diff_nodes"]

_DEP_FIELDS = ("data_deps", "ctrl_deps")


def diff_nodes(a, b, *, names=True, drop_attrs=()):
    """Every difference between two node lists, in file order: a list of (kind, message), kind being a field name
    (type, name, duration_micros, inputs.values, attributes, data_deps, ctrl_deps) or "only in A" / "only in B"."""
    ca = canonical_nodes(a, names=names, drop_attrs=drop_attrs)
    cb = canonical_nodes(b, names=names, drop_attrs=drop_attrs)
    pairs, only_a, only_b = _align(a, b, ca, cb)
    to_b = dict(pairs)
    out = []
    for i in only_a:
        out.append((i, "only in A", f"node #{i} (id {a[i].id} {a[i].name!r}) is only in A"))
    for j in only_b:
        out.append((j, "only in B", f"node #{j} (id {b[j].id} {b[j].name!r}) is only in B"))
    for i, j in pairs:
        x, y = ca[i], cb[j]
        where = f"node #{i} (id {a[i].id} {a[i].name!r} vs id {b[j].id} {b[j].name!r})"
        for k, field in enumerate(_FIELDS):
            u, v = x[k], y[k]
            if field in _DEP_FIELDS:
                u = tuple(to_b.get(d, ("unmatched", d)) if isinstance(d, int) else d for d in u)
            if u == v:
                continue
            if field == "attributes":
                out.append((i, field, f"{where}: attributes {_attr_diff(u, v)}"))
            elif field in _DEP_FIELDS:
                out.append((i, field, f"{where}: {field} {_deps(x[k], a)} vs {_deps(v, b)}"))
            else:
                out.append((i, field, f"{where}: {field} {u!r} vs {v!r}"))
    out.sort(key=lambda t: t[0])
    return [(kind, message) for _, kind, message in out]


def _align(a, b, ca, cb):
    """(matched (i, j) pairs, unmatched positions of a, unmatched positions of b)."""
    if len(ca) == len(cb):
        return [(i, i) for i in range(len(ca))], [], []
    keys_a = [(n.type, n.name) for n in a]
    keys_b = [(n.type, n.name) for n in b]
    pairs = []
    for block in difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_matching_blocks():
        pairs += [(block.a + k, block.b + k) for k in range(block.size)]
    got_a, got_b = {i for i, _ in pairs}, {j for _, j in pairs}
    return pairs, [i for i in range(len(a)) if i not in got_a], [j for j in range(len(b)) if j not in got_b]


def _deps(positions, nodes):
    """Dependencies as node ids (for the message)."""
    return [nodes[p].id if isinstance(p, int) else f"absent id offset {p[1]}" for p in positions]


def _attr_diff(u, v):
    """The attributes that differ: name: A's (value, wire kind) vs B's, or absent."""
    da = {k: (val, kind) for k, val, kind in u}
    db = {k: (val, kind) for k, val, kind in v}
    parts = []
    for key in sorted(set(da) | set(db)):
        if da.get(key) != db.get(key):
            parts.append(f"{key}: {_show(da.get(key))} vs {_show(db.get(key))}")
    return "; ".join(parts)


def _show(item):
    if item is None:
        return "absent"
    value, kind = item
    return f"{value!r} ({kind})" if kind else repr(value)


def compare_nodes(a, b, *, names=True, drop_attrs=()):
    """The first difference between two node lists as a string, or None when they are the same graph."""
    if len(a) != len(b):
        return f"{len(a)} nodes vs {len(b)}"
    diffs = diff_nodes(a, b, names=names, drop_attrs=drop_attrs)
    return diffs[0][1] if diffs else None


def compare_traces(prefix_a, prefix_b, *, names=True, drop_attrs=(), details=10):
    """Compare every rank of two traces; returns the report lines (empty when equal): per rank that differs, the
    number of differences by kind, then the first ``details`` of them."""
    paths_a = rank_files(prefix_a)
    paths_b = rank_files(prefix_b)
    out = []
    if len(paths_a) != len(paths_b):
        out.append(f"{len(paths_a)} rank files vs {len(paths_b)}")
    for pa, pb in zip(paths_a, paths_b):
        na, nb = _read(pa)[1].nodes, _read(pb)[1].nodes
        diffs = diff_nodes(na, nb, names=names, drop_attrs=drop_attrs)
        if not diffs:
            continue
        counts = {}
        for kind, _ in diffs:
            counts[kind] = counts.get(kind, 0) + 1
        sizes = f" ({len(na)} nodes vs {len(nb)})" if len(na) != len(nb) else ""
        out.append(f"{pa} vs {pb}{sizes}: {len(diffs)} difference{'s' if len(diffs) > 1 else ''}: "
                   + ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items(), key=lambda kv: -kv[1])))
        out += [f"  {message}" for _, message in diffs[:details]]
        if len(diffs) > details:
            out.append(f"  ... and {len(diffs) - details} more (--details N shows more)")
    return out
