"""Dependency graph of one rank's trace, checked before the run starts. Data and control dependencies are alike (a
node is issuable once all its parents finished), as in the reference's FeederV3.

One missing parent is tolerated: Chakra's PyTorch converter drops the process root
``[pytorch|profiler|execution_trace|process]`` but keeps each thread root's control dependency on it. That
dependency is ignored with a warning, as the reference's v1 feeder (which ignores control dependencies) runs them.
"""

from __future__ import annotations

from astra_sim.errors import WorkloadError


#: names of the thread roots of PyTorch execution traces (current and pre-2023 spelling)
THREAD_ROOTS = ("[pytorch|profiler|execution_trace|thread]", "[pytorch|profiler|execution_graph|thread]")


def build_graph(path, nodes, warn=None):
    """Index ``nodes``: (by_id, children, parents_left, roots). A duplicated id keeps the later node and the union of
    both's dependencies (as the reference). An absent parent or a cycle is a :class:`WorkloadError` naming file and
    nodes, but for the thread roots' dependency on the process root (dropped, with ``warn``).
    """
    by_id = {}
    parents = {}
    dropped_root_deps = []
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
                if node.name in THREAD_ROOTS and not node.data_deps and parent in node.ctrl_deps:
                    dropped_root_deps.append((node_id, node.name, parent))
                    continue
                raise WorkloadError(
                    f"{path}: node {node_id} ({node.name!r}) depends on node {parent}, "
                    "which is not in the file"
                )
            children[parent].append(node_id)
        if dropped_root_deps and dropped_root_deps[-1][0] == node_id:
            deps = [p for p in deps if p in by_id]
        parents_left[node_id] = len(deps)
        if not deps:
            roots.append(node_id)
    if dropped_root_deps and warn is not None:
        shown = "; ".join(f"node {n} ({name!r}) on node {parent}" for n, name, parent in dropped_root_deps[:3])
        more = f" and {len(dropped_root_deps) - 3} more" if len(dropped_root_deps) > 3 else ""
        warn(f"{path}: ignored the control dependency of {shown}{more}, which is not in the file: the process "
             "root that Chakra's PyTorch converter leaves out while keeping its threads' dependency on it")
    check_acyclic(path, children, parents_left, roots, lambda n: by_id[n].name)
    return by_id, children, parents_left, roots


def check_acyclic(path, children, parents_left, roots, name_of, what="the dependency graph"):
    """A WorkloadError naming the nodes that can never run when ``what`` (``children``, ``parents_left`` counts,
    ``roots``) has a cycle; ``name_of(id)`` names a node."""
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
