"""Whether two completions of one rank's nodes at one nanosecond leave the same state in either order: a folded
run's tie check (:mod:`astra_folding.engine`) lets such ties be, since only which real event comes first is
unknown then. It asks the rank's workload (:class:`astra_sim.workload.workload.RankWorkload`) which slot each node
takes and whether a ready node would be issued (``slot_of``, ``could_issue``, ``waiting``, ``moves_host_clock``)."""

from __future__ import annotations

from bisect import bisect_right

from astra_sim.chakra import types as T
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
        return adjacent and issued_by_first == 1 and (_second_inert(workload, first_id, second_id)
                                                      or _issues_apart(workload, first_id, second_id))
    return _issues_nothing(workload, first_id, second_id) or _issues_alike(workload, first_id, second_id)


def why_not(workload, first_id, second_id, issued_by_first, adjacent):
    """Why :func:`completions_commute` could not prove the tie (for the reason a fold was abandoned)."""
    now = workload.shared.engine.now
    if workload.slot_of(second_id) == NO_SLOT and workload.node_start_ns.get(second_id) == now and issued_by_first:
        return ("the second is a receive posted at this nanosecond: it completes within its message's arrival in "
                "one order and by an event of its own in the other")
    if not issued_by_first:
        return "the second, coming first, would issue nodes that the first's completion changes"
    if not adjacent:
        return "the first issued nodes, and other callbacks of the rank ran between the two"
    if workload.host is not None:
        return ("both issue nodes, which the host may not have launched by now: their launch events would take "
                "their places in the order the completions ran")
    return "both issue nodes, which may compete for a slot or be issued in another order"


def _second_inert(workload, first_id, second_id):
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
    if workload.slot_of(second_id) != NO_SLOT or workload.moves_host_clock(second_id):
        return False
    first_slot = workload.slot_of(first_id)
    if first_slot is None or first_slot == NO_SLOT or workload.slot_busy[first_slot] != 1:
        return False
    parents_left = workload.parents_left
    if any(parents_left[c] < 2 for c in workload.children[second_id]):
        return False
    busy = workload.slot_busy
    return not any(workload.could_issue(node_id, busy) for node_id in workload.waiting())


def _issues_apart(workload, first_id, second_id):
    """A send's completion and a receive's, in either order, each issuing nodes on slots of its own: a send's (the
    next send on the slot it frees) and kernels (the receive's children). Then each pass issues the same nodes in
    either order, and only the order of the two issues differs, which nothing reads when the host has launched every
    one of them by now (each dispatched at its issue: :func:`_launched`) and neither completion moves it.

    The first completion issued one node (``issued_by_first`` 1) and nothing is ready now on a free slot. A send
    first (its slot ``s`` holds the node it issued, as in :func:`_second_inert`: nothing was ready before on a free
    slot); the receive frees nodes, none on ``s``: kernels that take time (timed at the end of the nanosecond, or
    replayed: none completes within the pass), receives (posted at once in either order; each a host launch) and, on
    per-communicator streams with closed-form network delays, sends to other destinations than ``s``'s
    (:func:`_sends_apart`); those whose slot is free are issued, the others wait in either order. A receive first: the one node it issued is a kernel it freed on another slot
    than the send's, no other node ready then on a free slot (none now but its freed children, counting the
    kernel's slot free), none of its freed children on ``s``; the send frees no child and its pass issues the
    lowest ready id of ``s``, a send. A node the receive frees that waited for the send too must be a kernel, and
    the only kernel it frees (:func:`_shared_children`). The kernels' and the send's dispatches read nothing the other writes (a kernel's
    time depends on it alone or on all of the nanosecond), and the histories they schedule are marked as for any
    commuting tie."""
    if workload.moves_host_clock(first_id) or workload.moves_host_clock(second_id):
        return False
    first_slot, second_slot = workload.slot_of(first_id), workload.slot_of(second_id)
    if first_slot is None or second_slot is None:
        return False
    nodes, children, parents_left, busy = workload.nodes, workload.children, workload.parents_left, workload.slot_busy
    slot_of = workload.slot_of
    waiting = workload.waiting()
    issued = []  # the nodes issued by either (the host must have launched them by now)
    if first_slot != NO_SLOT and second_slot == NO_SLOT:  # a send, then a receive
        if busy[first_slot] != 1 or any(workload.could_issue(n, busy) for n in waiting):
            return False
        freed_slots, receives, sends, freed = set(), 0, False, False
        left_to_send = _shared_children(workload, first_id, second_id)
        for child in children[second_id]:
            if parents_left[child] != 1:
                continue
            freed = True
            slot = slot_of(child)
            if slot is None or slot == first_slot:
                return False
            node = nodes[child]
            if node.attrs.get("cuda_graph") is not None:
                return False
            if left_to_send and (node.type == T.COMP_NODE) != (child in left_to_send):
                return False  # a shared node not a kernel, or a kernel beside one (see _shared_children)
            if node.type == T.COMM_RECV_NODE:
                receives += 1  # posted at once, whatever the order
            elif node.type == T.COMP_NODE or (node.type == T.COMM_SEND_NODE and slot > NO_SLOT):
                sends = sends or node.type == T.COMM_SEND_NODE
                if not busy[slot]:
                    freed_slots.add(slot)
            else:
                return False
        if not freed or (sends and not _sends_apart(workload, first_slot, children[second_id])):
            return False  # (frees nothing: _second_inert's case)
        shared = workload.shared
        if freed_slots and not (workload.time_at_end_of_ns or shared.system_config.replay_only
                                or getattr(shared.compute_model, "name", None) == "replay"):
            return False  # a kernel might complete within the pass (no time: roofline's empty tensors)
        issued = [c for c in children[second_id] if parents_left[c] == 1]
        issued += [n for n in (workload.comm_running or ()) if slot_of(n) == first_slot]  # the first's
    elif first_slot == NO_SLOT and second_slot != NO_SLOT:  # a receive, then a send
        if busy[second_slot] != 1 or any(parents_left[c] < 2 for c in children[second_id]):
            return False
        freed = {c for c in children[first_id] if parents_left[c] == 0}
        started = workload.node_start_ns
        kernel = [c for c in freed if c in started]
        if len(kernel) != 1:
            return False
        kernel_slot = slot_of(kernel[0])
        if (nodes[kernel[0]].type != T.COMP_NODE or kernel_slot in (None, NO_SLOT, second_slot)
                or busy[kernel_slot] != 1 or nodes[kernel[0]].attrs.get("cuda_graph") is not None
                or started[kernel[0]] != workload.shared.engine.now):
            return False
        before = list(busy)
        before[kernel_slot] = 0
        if any(slot_of(c) == second_slot for c in freed):
            return False
        if any(workload.could_issue(n, before) for n in waiting - freed):
            return False
        on_slot = [n for n in waiting if slot_of(n) == second_slot]
        if on_slot:
            nxt = nodes[min(on_slot)]
            if nxt.type != T.COMM_SEND_NODE or nxt.attrs.get("cuda_graph") is not None:
                return False
            issued = [nxt.id]
    else:
        return False
    return _launched(workload, issued)


def _launched(workload, ids):
    """Whether the host (if any) has launched by now each op of ``ids``, issued now or by the second's pass: then
    each is dispatched at its issue, in either order. The host launches in trace order whatever the issue order
    (:mod:`astra_sim.workload.host`), so only a launch still ahead matters: its event takes its place among its
    nanosecond's in the order the completions ran."""
    host = workload.host
    if host is None:
        return True
    now, started, ops = workload.shared.engine.now, workload.node_start_ns, host.ops
    for op in ids:
        if op in started:  # issued: dispatched now, or waiting for its launch or for the host
            if started[op] > now or op in host.pending:
                return False
        elif op in host.at:
            if host.at[op] > now:
                return False
        elif not host.passed(op):  # the walk to it: one launch an op at most, no wait before it
            end = bisect_right(ops, op)
            if (host.blocked is not None or host.clock + (end - host.next) * host.launch_ns > now
                    or any(ops[i] in host.waits for i in range(host.next, end - 1))):
                return False
    return True


def _shared_children(workload, first_id, second_id):
    """The nodes the second completion frees that waited for the first too. Coming first, the second would not free
    them: the first's pass would issue them, after the second's nodes (``test_tie_group_rule``: a kernel that needs
    both and one that needs the receive alone take the compute slot in the other order).

    :func:`_issues_apart` allows them when they are kernels and the receive frees no other kernel: then each
    is alone on its slot among the freed nodes (so it is issued, or waits, in either order), and only its dispatch
    moves after the receive's other nodes (receives and sends, which are not in the kernels' completion batches
    whose order is their dispatch order); :func:`_issues_alike` never (the second would issue it)."""
    first_children, parents_left = workload.children[first_id], workload.parents_left
    return {c for c in workload.children[second_id] if parents_left[c] == 1 and c in first_children}


def _sends_apart(workload, first_slot, candidates):
    """Sends freed by the receive go out beside the send's next one in either order: the network's delays are a
    closed form (no link state that the order of two sends could change), and no freed send goes to the
    destination of the first's slot (a matcher key in common would pair the other way)."""
    if getattr(workload.shared.matcher, "_delay", None) is None or workload.comm_slots is None:
        return False
    keys = [key for key, slot in workload.comm_slots.items() if slot == first_slot]
    if len(keys) != 1:
        return False
    nodes = workload.nodes
    return not any(nodes[c].type == T.COMM_SEND_NODE and nodes[c].attrs.get("comm_dst") == keys[0][1]
                   for c in candidates)


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
    no children, holds no slot they use and did not move the host clock, and no child the second frees now is the
    first's too (:func:`_shared_children`). (A compute model that reads the communication in flight times nodes at
    the end of the nanosecond, after both.)"""
    children, parents_left = workload.children, workload.parents_left
    if any(parents_left[c] == 0 for c in children[first_id]) or _shared_children(workload, first_id, second_id):
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


def group_commutes(workload, done_ids, node_id):
    """Whether every order of a group of tied completions of ``workload``'s nodes (``done_ids``, which have run,
    and running node ``node_id``, about to) ends in one state, with a pass that issues nothing after each but the
    last. The caller (``engine._group_inert``) has checked that only completions of the rank ran since the group's
    first member and that none issued a node.

    A completion frees its slot (a receive holds none), counts down its children's parents (those at zero join the
    ready nodes, a set: a pass moves them into id heaps) and may move the host's clock to a maximum: each of these
    commutes. A pass issues a node exactly when a ready node's slot is free (nothing issued, nothing is set aside).
    Call A the state after all the completions since the group's first member and this one. Whatever order the
    members run in (the other completions keep their places, this one's place is the group's last), a pass before
    the last runs in a state that lacks at least one member ``m``: it has no more ready nodes (a child is freed
    only by its last parent) and no fewer busy slots than A without ``m`` (``m``'s slot busy, ``m``'s children
    that only ``m`` holds back not ready), which this checks has nothing to issue, for every member. So every
    order issues nothing before the last pass, which then runs in A, as the folded run's does (issuing the same
    nodes, whose histories the tie check marks)."""
    if node_id not in workload.node_start_ns:
        return False
    slot_of, children, parents_left = workload.slot_of, workload.children, workload.parents_left
    slot = slot_of(node_id)
    if slot is None:
        return False
    busy = list(workload.slot_busy)  # in A
    if slot != NO_SLOT:
        busy[slot] -= 1
    freed_now = {c for c in children[node_id] if parents_left[c] == 1}
    ready = workload.waiting() | freed_now  # in A
    for member in (*done_ids, node_id):
        member_slot = slot_of(member)
        if member_slot is None:
            return False
        held_back = freed_now if member == node_id else {c for c in children[member] if c in ready}
        lacking = list(busy)
        if member_slot != NO_SLOT:
            lacking[member_slot] += 1
        if any(workload.could_issue(n, lacking) for n in ready - held_back):
            return False
    return True
