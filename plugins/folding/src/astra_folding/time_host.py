"""Time folding (:mod:`astra_folding.time_fold`) of a rank whose host launches its GPU ops in trace order
(``host_launch_us``: :mod:`astra_sim.workload.host`): what of the host is compared, checked and moved by a jump.

*Compared.* The host's position (the last op its walk passed, as a node), its clock relative to now (not while it
waits: the wait's end sets it), its last CUDA graph, the op it waits for, the launch times still ahead of now of the
ops it passed and has not dispatched (a launch at or before now is due: dispatched at its issue, like any op the
walk passed without a time), the issued ops it has not reached, and the held op its wake-up event launches. The
held ops ahead of it (issued at the start: :class:`~astra_sim.workload.host.Host`) are not compared: which they
are is a function of the position (the trace). The ops the walk passes over a period are the period's (its
position moves with the rank's finished count, compared), so they are checked with the touched nodes
(:func:`walked`); the ops issued at the start are checked apart (:func:`held_repeats`): a receive without parents
always is (its signature says so), any other only where the trace says.

While held ops are left, the receives without parents that the host has posted are ordinary state (posted at
their launch, a position of the host's); once it has posted them all they are pre-posted, as without a host:
posted before the state, at their own times (:func:`posts_all`).

*Ahead.* A host that still holds ops and waits for nothing says :data:`AHEAD` instead of all of the above:
:mod:`astra_folding.time_ahead` runs it forward at a jump.

*Behind.* A host faster than its GPU falls behind by more every period: its clock is never the same relative to
now. Once it has dispatched every held op, waits for no op and no op left makes it wait (``host_waits``), and its
clock is at or before now, the state says :data:`BEHIND` instead; a jump from A to B needs its clock at B at or
before ``t_A`` (the period's launches were all due at its start) and at most one launch per node a period (``D``
launches at most ``P``): then the repeats' launches, at most ``clock_B + j D`` launches, are due at repeat ``j``'s
start (``t_A + j P``) and delay nothing, as in the period. Nothing of the host is moved then: its walk, lazy,
goes on from where it is, to the same times.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from astra_sim.chakra import types as T

#: a host far enough behind its GPU never to delay a launch again (see the module docstring)
BEHIND = "behind"
#: a host ahead of its GPU, posting its held receives early: not compared, run forward at a jump (time_ahead)
AHEAD = "ahead"


def posts_all(w):
    """Whether the rank's receives without parents are pre-posted (no host, or its host has posted every held op)."""
    host = w.host
    return host is None or host.held_next >= len(host.held)


def behind(w, now):
    """Whether the host of ``w`` is :data:`BEHIND` at ``now``."""
    host = w.host
    return (host.blocked is None and host.wake is None and host.held_next >= len(host.held)
            and host.next > host.last_wait and host.clock <= now)


def ahead(w):
    """Whether the host of ``w`` may be :data:`AHEAD`: it waits for nothing and its wake-up posts its next held op
    (:mod:`astra_folding.time_ahead` checks at the jump that the GPU never waits for it)."""
    host = w.host
    return (host.blocked is None and not host.pending and host.wake is not None and host.held_next < len(host.held)
            and host.wake == host.held[host.held_next])


def undispatched(w):
    """The held ops not dispatched yet (a new set)."""
    host = w.host
    return set(host.held[host.held_next:])


def state(w, node, now):
    """The host's part of the compared state (see the module docstring); ``node`` names a node of the rank."""
    host, rank = w.host, w.rank
    if behind(w, now):
        return BEHIND
    if ahead(w):
        return AHEAD
    ahead_at = tuple(sorted((node(rank, n), t - now) for n, t in host.at.items() if t > now))
    return (None if host.next == 0 else node(rank, host.ops[host.next - 1]),
            None if host.blocked is not None or host.next == len(host.ops) else host.clock - now, host.graph,
            None if host.blocked is None else node(rank, host.blocked), ahead_at,
            tuple(sorted(node(rank, n) for n in host.pending)), None if host.wake is None else node(rank, host.wake))


def position(w):
    """The last op the host's walk passed (-1 before the first), for the snapshot."""
    host = w.host
    return host.ops[host.next - 1] if host.next else -1


def walked(w, touched, before, after):
    """Add the nodes the walk passed over the period (ids ``before`` + 1 .. ``after``) to ``touched``: the repeats'
    walk reads their images (a GPU op or not, CUDA graph, host_waits; held or not: :func:`held_repeats`)."""
    if after > before:
        touched.update(range(before + 1, after + 1))


def keeps_behind(w, t_a, t_b, step):
    """Whether a host :data:`BEHIND` at A and B delays no launch of the period or its repeats (module docstring)."""
    host = w.host
    return host.clock <= t_a and step * host.launch_ns <= t_b - t_a


def held_repeats(w, touched, step, limit, parents):
    """How many repeats (``limit`` at most) keep the ops issued at the start where the period had them: a touched
    op is held (issued at the start) exactly when its images are. A receive without parents is always, and a node's
    image has its number of parents (compared): only the others are looked at."""
    host = w.host
    if host is None or step <= 0:
        return limit
    held = host.held
    odd = [s for s in held if parents.get(s, 0) or w.nodes[s].type != T.COMM_RECV_NODE]
    if not odd:
        return limit
    odd_set = set(odd)
    for s in odd:
        for j in range(1, limit + 1):
            if (s in touched and s + j * step not in odd_set) or (s - j * step in touched
                                                                  and s - j * step not in odd_set):
                limit = j - 1
                break
    return limit


def move(w, k, dt, d, now):
    """Move the host of ``w`` on by ``k`` periods (``dt`` ns, ``d`` nodes) from state B at ``now``; its held ops
    not dispatched then and still not after the jump keep their place (returned: the set of those at B, which the
    caller does not move)."""
    host = w.host
    if behind(w, now):  # nothing to move: its walk goes on from where it is (the module docstring)
        host.at.clear()
        return set()
    held_b = undispatched(w)
    pos = position(w)
    if host.held_next < len(host.held):
        first = host.held[host.held_next]
        host.held_next = (bisect_left(host.held, first + d) if first in host.at
                          else bisect_right(host.held, pos + d))  # passed (a time ahead), or beyond the walk
    if host.next:
        host.next = bisect_left(host.ops, pos + d) + 1
    host.clock += dt
    if host.blocked is not None:
        host.blocked += d
    host.at = {n + d: t + dt for n, t in host.at.items() if t > now}
    host.pending = {n + d: slot for n, slot in host.pending.items()}
    if host.wake is not None:
        host.wake += d
    return held_b
