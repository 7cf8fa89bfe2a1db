"""Placement policies: which free GPUs a job gets (a list, one GPU per rank, in rank order), or None when it does
not fit now.

* ``contiguous``: first fit, the lowest-numbered free GPUs;
* ``random``: free GPUs drawn with the cluster's seeded generator (then in GPU order);
* ``topology``: as few nodes as possible: whole free nodes first, the rest on the free node that fits it most
  tightly (best fit), spilling over the nodes with the most free GPUs only when no node fits;
* ``fixed``: the job's own ``place`` list, when every GPU of it is free."""

from __future__ import annotations


def place(policy, job, free, gpus_per_node, rng):
    """The GPUs ``job`` gets from the set ``free`` under ``policy``, or None."""
    n = job.gpus
    if policy == "fixed":
        return list(job.place) if all(g in free for g in job.place) else None
    if n > len(free):
        return None
    if policy == "contiguous":
        return sorted(free)[:n]
    if policy == "random":
        return sorted(rng.sample(sorted(free), n))
    return _pack(n, free, gpus_per_node)


def _pack(n, free, gpus_per_node):
    by_node = {}
    for gpu in sorted(free):
        by_node.setdefault(gpu // gpus_per_node, []).append(gpu)
    chosen = []
    whole = [node for node, gpus in sorted(by_node.items()) if len(gpus) == gpus_per_node]
    while n - len(chosen) >= gpus_per_node and whole:
        chosen += by_node.pop(whole.pop(0))
    rest = n - len(chosen)
    if rest:
        fits = [(len(gpus), node) for node, gpus in by_node.items() if len(gpus) >= rest]
        if fits:
            chosen += by_node[min(fits)[1]][:rest]
        else:
            for _count, node in sorted(((-len(g), node) for node, g in by_node.items())):
                take = by_node[node][:n - len(chosen)]
                chosen += take
                if len(chosen) == n:
                    break
    return sorted(chosen)


def shape_key(gpus, gpus_per_node):
    """The placement up to renumbering nodes: per rank ``(node in order of first use, GPU within the node)``.
    On a platform (switched nodes: any permutation of nodes keeps every delay) equal keys give equal steps."""
    nodes = {}
    key = []
    for gpu in gpus:
        node = nodes.setdefault(gpu // gpus_per_node, len(nodes))
        key.append((node, gpu % gpus_per_node))
    return tuple(key)


def nodes_used(gpus, gpus_per_node) -> int:
    return len({gpu // gpus_per_node for gpu in gpus})
