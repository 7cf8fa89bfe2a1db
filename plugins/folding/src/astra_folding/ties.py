"""Whether two completions of one rank's nodes at one nanosecond leave the same state in either order: a folded
run's tie check (:mod:`astra_folding.engine`) lets such ties be, since only which real event comes first is
unknown then. It asks the rank's workload (:class:`astra_sim.workload.workload.RankWorkload`) which slot each node
takes and whether a ready node would be issued (``slot_of``, ``could_issue``, ``waiting``, ``moves_host_clock``)."""

from __future__ import annotations

from astra_sim.workload.workload import NO_SLOT


def completions_commute(workload, first_id, second_id, issued_by_first):
    """Whether completing nodes ``first_id`` and ``second_id`` of ``workload`` at one nanosecond gives the same
    state in either order. ``first_id`` has completed, issuing ``issued_by_first`` nodes; ``second_id`` is still
    running.

    It does when neither completion, coming first, lets the rank issue a node: then after both the ready nodes and
    the free slots are the same whichever came first. The first did not (nothing was issued); the second, first,
    would have had its own slot and children free but the first's slot busy and the first's children waiting. It
    does too when the second, first, issues nodes that see the same state either way (:func:`_issues_alike`)."""
    if issued_by_first or first_id not in workload.nodes or second_id not in workload.node_start_ns:
        return False
    return _issues_nothing(workload, first_id, second_id) or _issues_alike(workload, first_id, second_id)


def _issues_nothing(workload, first_id, second_id):
    children, parents_left = workload.children, workload.parents_left
    first_children = children[first_id]
    freed_by_first = {c for c in first_children if parents_left[c] == 0}
    candidates = (workload.waiting() - freed_by_first) | {
        c for c in children[second_id] if parents_left[c] == 1 and c not in first_children}
    busy = list(workload.slot_busy)
    first_slot = workload.slot_of(first_id)
    second_slot = workload.slot_of(second_id)
    if first_slot is None or second_slot is None:
        return False
    if first_slot != NO_SLOT:
        busy[first_slot] += 1
    if second_slot != NO_SLOT:
        busy[second_slot] -= 1
    return not any(workload.could_issue(node_id, busy) for node_id in candidates)


def _issues_alike(workload, first_id, second_id):
    """The second completion, coming first, issues nodes; they see the same state as after both: the first freed
    no children, holds no slot they use and did not move the host clock. (A compute model that reads the
    communication in flight times nodes at the end of the nanosecond, after both.)"""
    children, parents_left = workload.children, workload.parents_left
    if any(parents_left[c] == 0 for c in children[first_id]):
        return False
    if workload.moves_host_clock(first_id):
        return False
    first_slot = workload.slot_of(first_id)
    if first_slot is None:
        return False
    candidates = workload.waiting()
    candidates.update(c for c in children[second_id] if parents_left[c] == 1)
    for node_id in candidates:
        slot = workload.slot_of(node_id)
        if slot is None or (slot == first_slot and slot != NO_SLOT):
            return False
    return True
