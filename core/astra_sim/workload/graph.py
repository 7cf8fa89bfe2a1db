"""Dependency graph of one rank's trace, checked before the run starts.

Data and control dependencies are treated alike (a node is issuable once all
its parents of either kind finished), like the reference's FeederV3.
"""

from __future__ import annotations

from astra_sim.errors import WorkloadError


def build_graph(path, nodes):
    """Index ``nodes``: returns (by_id, children, parents_left, roots).

    A duplicated id keeps the later node's content and the union of both
    nodes' dependencies (what the reference does). A dependency on an absent
    node or a cycle is a :class:`WorkloadError` naming the file and nodes.
    """
    by_id = {}
    parents = {}
    for node in nodes:
        deps = parents.get(node.id)
        if deps is None:
            deps = parents[node.id] = []
        for parent in node.data_deps:
            if parent not in deps:
                deps.append(parent)
        for parent in node.ctrl_deps:
            if parent not in deps:
                deps.append(parent)
        by_id[node.id] = node
    children = {node_id: [] for node_id in by_id}
    parents_left = {}
    roots = []
    for node_id, deps in parents.items():
        for parent in deps:
            if parent not in by_id:
                node = by_id[node_id]
                raise WorkloadError(
                    f"{path}: node {node_id} ({node.name!r}) depends on node {parent}, "
                    "which is not in the file"
                )
            children[parent].append(node_id)
        parents_left[node_id] = len(deps)
        if not deps:
            roots.append(node_id)
    check_acyclic(path, children, parents_left, roots, lambda n: by_id[n].name)
    return by_id, children, parents_left, roots


def check_acyclic(path, children, parents_left, roots, name_of, what="the dependency graph"):
    """Raise a WorkloadError naming the nodes that can never run when ``what`` has a cycle.

    ``children``: id -> child ids; ``parents_left``: id -> number of parents; ``roots``: ids with
    none; ``name_of(id)``: the node's name for the message.
    """
    left = dict(parents_left)
    stack = list(roots)
    seen = 0
    while stack:
        node_id = stack.pop()
        seen += 1
        for child in children[node_id]:
            left[child] -= 1
            if left[child] == 0:
                stack.append(child)
    if seen != len(left):
        stuck = sorted(node_id for node_id, count in left.items() if count > 0)
        shown = ", ".join(f"{n} ({name_of(n)!r})" for n in stuck[:10])
        more = f" and {len(stuck) - 10} more" if len(stuck) > 10 else ""
        raise WorkloadError(f"{path}: {what} has a cycle; these nodes can never run: {shown}{more}")
