"""Folding the ``congestion`` backend's links: a folded run simulates one rank per class of a rank symmetry, and
every link's FIFO queue becomes the queue of its orbit.

Why it is exact. The symmetry's relabellings are automorphisms of the graph built from the analytical YAML
(each shifts one dimension's coordinate: a ring's rotation, any permutation of a switch's or a fully connected
dimension's members) that keep the dimension-ordered routes. In the unfolded run a link ``C`` carries exactly the
messages ``g(m)`` for the simulated messages ``m`` that cross a link of ``C``'s orbit (``g`` mapping that link to
``C``), at the times ``m`` crosses it. Every orbit's links see the same history, so one queue per orbit, fed with
every simulated message at each hop it takes through the orbit, has the unfolded queue's history: the same
starts, the same waits and the same per-link totals. The relabellings act freely on ranks, and every link of
such a graph ends at an NPU, so they act freely on links: no message is counted twice.

What it cannot decide. When two messages enter one orbit's queue at the same nanosecond through different links
(or from different simulated ranks), their order in the unfolded queue follows the global event order of ranks
the fold does not simulate; the run then raises :class:`FoldLinkTie` and is simulated unfolded. Messages of one
rank entering through one link keep that rank's order, which the folded engine keeps.
"""

from __future__ import annotations

from collections import deque

from astra_sim.errors import FoldAbandoned

RING, FULLY_CONNECTED, SWITCH = "Ring", "FullyConnected", "Switch"


class FoldLinkTie(FoldAbandoned):
    """Two messages entered one link orbit at the same nanosecond in an order the fold cannot know."""


def symmetry_kinds(layout):
    """Per dimension of ``layout`` (``[(stride, count, topology)]``), the relabellings that keep the graph and
    its routes: a ring's rotations, any permutation of a switch or a fully connected dimension."""
    return ["rotation" if topology == RING else "any" for _stride, _count, topology in layout]


def link_orbits(graph, layout, symmetry):
    """Per link index, the index of its orbit's canonical link: the image of the link under the relabelling
    that takes its NPU end (the source when it is an NPU, else the destination) to its class representative.

    A shift may rotate a digit inside one switch or fully connected dimension (any permutation of its members
    keeps its links and routes), or a whole ring. Raises :class:`FoldAbandoned` otherwise: such a relabelling
    need not keep the graph or the routes."""
    for shift in symmetry.shifts:
        inside = [(dim, stride, count, topology) for dim, (stride, count, topology) in enumerate(layout)
                  if stride <= shift.stride and shift.stride * shift.radix <= stride * count
                  and shift.stride % stride == 0]
        if not inside:
            raise FoldAbandoned(f"congestion: the symmetry shifts digit (stride {shift.stride}, radix {shift.radix}), "
                                "which lies in no single network dimension")
        dim, stride, count, topology = inside[0]
        if topology == RING and not (shift.stride == stride and shift.radix == count == shift.block):
            raise FoldAbandoned(f"congestion: dimension {dim} is a ring; the symmetry moves blocks of {shift.block} "
                                f"of its {count} NPUs, not the whole ring, which moves its links")
    node_of_rank = {name: rank for rank, name in enumerate(graph.rank_node)}
    index_of = {(link.src, link.dst): link.index for link in graph.links}

    def switch_of(rank, dim):
        stride, count, _topology = layout[dim]
        span = stride * count
        return f"d{dim}.g{(rank // span) * stride + rank % stride}.switch"

    def image(name, anchor, offsets, moved_anchor):
        """``name`` (an NPU, or the switch of a group ``anchor`` belongs to) under the relabelling that moves
        ``anchor`` by minus ``offsets`` (to ``moved_anchor``)."""
        rank = node_of_rank.get(name)
        if rank is not None:
            return graph.rank_node[symmetry.moved(rank, offsets, -1)]
        dim = int(name[1:name.index(".")])
        if switch_of(anchor, dim) != name:
            raise FoldAbandoned(f"congestion: link end {name!r} is not the switch of NPU {anchor}'s group")
        return switch_of(moved_anchor, dim)

    canonical = []
    for link in graph.links:
        end = link.src if link.src in node_of_rank else link.dst
        anchor = node_of_rank.get(end)
        if anchor is None:
            raise FoldAbandoned(f"congestion: link {link.src} -> {link.dst} joins two switches")
        offsets = symmetry.offsets(anchor)
        moved = symmetry.moved(anchor, offsets, -1)
        key = (image(link.src, anchor, offsets, moved), image(link.dst, anchor, offsets, moved))
        target = index_of.get(key)
        if target is None:
            raise FoldAbandoned(f"congestion: link {link.src} -> {link.dst} has no image {key[0]} -> {key[1]}")
        canonical.append(target)
    return canonical


def build_folded_handlers(network, canonical, link_load=None):
    """``send`` for a folded run: as :class:`~astra_network_congestion.links.LinkQueues`', with every hop's queue the
    queue of the link's orbit (``canonical``) and the check that decides the order of same-nanosecond entries."""
    n_links = len(canonical)
    busy = [False] * n_links
    queues = [None] * n_links
    free_at = [-1] * n_links
    entered_ns = [-1] * n_links  # per canonical link: when a message last entered it ...
    entered_by = [None] * n_links  # ... and through which link, from which simulated rank
    max_queue = network._max_queue
    engine = network.engine
    schedule = engine.schedule
    if link_load is not None:
        engine_schedule = schedule
        add = link_load.add

        def schedule(delay, fn, arg):  # noqa: F811 - the recording variant (the orbit's canonical link)
            if fn is free:
                add(arg, engine.now, engine.now + delay)
            engine_schedule(delay, fn, arg)

    cache = network._hops
    make_hops = network._make_hops
    links = network.graph.links

    def arrive(chunk):
        hops = chunk[0]
        pos = chunk[1] + 3
        if pos == len(hops):
            chunk[2](chunk[3])
            return
        chunk[1] = pos
        actual = hops[pos]
        link = canonical[actual]
        now = engine.now
        source = (actual, chunk[4])
        if entered_ns[link] == now and entered_by[link] != source:
            raise FoldLinkTie(
                f"congestion: two messages entered the links of {links[link].src} -> {links[link].dst}'s orbit at "
                f"{now} ns (through {links[entered_by[link][0]].src} -> {links[entered_by[link][0]].dst} and "
                f"{links[actual].src} -> {links[actual].dst}); their order depends on ranks the fold does not simulate")
        entered_ns[link] = now
        entered_by[link] = source
        if busy[link]:
            queue = queues[link]
            if queue is None:
                queue = queues[link] = deque()
            queue.append(chunk)
            waiting = len(queue) - (free_at[link] == now)
            if waiting > max_queue[link]:
                max_queue[link] = waiting
        else:
            busy[link] = True
            free_at[link] = now + hops[pos + 2]
            schedule(hops[pos + 1], arrive, chunk)
            schedule(hops[pos + 2], free, link)

    def free(link):
        queue = queues[link]
        if queue:
            chunk = queue.popleft()
            hops = chunk[0]
            pos = chunk[1]
            free_at[link] = engine.now + hops[pos + 2]
            schedule(hops[pos + 1], arrive, chunk)
            schedule(hops[pos + 2], free, link)
        else:
            busy[link] = False

    def send(src, dst, size, fn, arg):
        hops = cache.get((src, dst, size))
        if hops is None:
            hops = make_hops(src, dst, size)
        hops[0] += 1
        arrive([hops, -2, fn, arg, src])

    return send, busy, queues
