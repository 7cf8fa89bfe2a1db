"""Whether two completions of one rank's nodes at one nanosecond leave the same state in either order: a folded
run's tie check (:mod:`astra_folding.engine`) lets such ties be, since only which real event comes first is
unknown then. It asks the rank's workload (:class:`astra_sim.workload.workload.RankWorkload`) which slot each node
takes and whether a ready node would be issued (``slot_of``, ``could_issue``, ``waiting``, ``moves_host_clock``)."""

from __future__ import annotations

from astra_sim.system.frontend import Message
from astra_sim.workload.workload import NO_SLOT


def arrival_commutes(fold, earlier_op, op, record):
    """Whether a message's arrival before its receive is posted (the tie check's op is the ``Message``: it only
    sets ``arrived``) and another callback of its rank at one nanosecond leave the same state in either order.

    The arrival reads and writes nothing but its message: the receive it finds is the one already paired with it
    (pairing follows the order sends and receives are posted, not arrivals), and it found none. The other callback
    reads the message only if it posts the receive paired with it: after the arrival that receive completes by an
    event of its own (``_deliver_now``), before it within the arrival. So they commute unless the other callback
    pairs a receive with the message. When the arrival came second, that callback has run and did not (the message
    would have its receive); when it came first, the callback has yet to run, and the matcher asks the fold
    (:meth:`~astra_folding.engine.FoldedEvents.paired`) whether it does, raising then."""
    if op.__class__ is Message:
        return op.recv_fn is None
    if earlier_op.__class__ is Message and earlier_op.recv_fn is None:
        fold.watch(earlier_op, record)
        return True
    return False


def completions_commute(workload, first_id, second_id, issued_by_first, adjacent=False):
    """Whether completing nodes ``first_id`` and ``second_id`` of ``workload`` at one nanosecond gives the same
    state in either order. ``first_id`` has completed, issuing ``issued_by_first`` nodes; ``second_id`` is still
    running; ``adjacent``: no other callback of the rank ran between the two.

    It does when neither completion, coming first, lets the rank issue a node: then after both the ready nodes and
    the free slots are the same whichever came first. The first did not (nothing was issued); the second, first,
    would have had its own slot and children free but the first's slot busy and the first's children waiting. It
    does too when the second, first, issues nodes that see the same state either way (:func:`_issues_alike`), and
    when the second changes nothing in either order though the first issued a node (:func:`_second_inert`)."""
    if first_id not in workload.nodes or second_id not in workload.node_start_ns:
        return False
    if issued_by_first:
        return adjacent and _second_inert(workload, first_id, second_id, issued_by_first)
    return _issues_nothing(workload, first_id, second_id) or _issues_alike(workload, first_id, second_id)


def _second_inert(workload, first_id, second_id, issued_by_first):
    """The second completion, in either order, only records its node: it holds no slot (a receive), does not move
    the host clock, frees no child, and its pass over the ready nodes issues nothing, after the first (the state
    now) and before it. Then the first's completion runs the same from either state (the second's pass only moves
    the ids freed earlier into their heaps, which a pass reads alike).

    AsyncTP's ring (``--tp-comm-overlap`` with fsdp2: a step's send and receive complete at one nanosecond): the
    send's completion issues the next step's send on the slot it frees; the receive's child (the partial sums'
    reduction) waits for the other steps' receives.

    Before the first (state S0, not kept), the second's pass issues nothing when the first's single issued node
    went onto the slot the first held: a node ready in S0 whose slot was free there (another slot: the first
    held its own) would have been issued by the first's pass on that other slot, since a pass ends only when no
    free slot holds a ready node (one it passed by while that slot was busy is set aside to the next pass, but a
    slot free from the pass's start has its head taken). The node on the first's slot now is the first's issue:
    that slot was the first's until it completed, and a slot holds one node at a time."""
    if issued_by_first != 1 or workload.slot_of(second_id) != NO_SLOT or workload.moves_host_clock(second_id):
        return False
    first_slot = workload.slot_of(first_id)
    if first_slot is None or first_slot == NO_SLOT or workload.slot_busy[first_slot] != 1:
        return False
    parents_left = workload.parents_left
    if any(parents_left[c] < 2 for c in workload.children[second_id]):
        return False
    busy = workload.slot_busy
    return not any(workload.could_issue(node_id, busy) for node_id in workload.waiting())


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
