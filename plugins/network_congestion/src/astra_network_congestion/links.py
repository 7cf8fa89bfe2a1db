"""The ``congestion`` backend's hot path: one FIFO queue per directed link, driven by the event engine.

Kept apart from :mod:`astra_network_congestion.congestion` (setup, routes, report) so that ``tools/compile_core.py``
can compile it with mypyc: a native class with typed attributes (int lists, the engine's class), called by the
compiled engine and matcher without Python's call overhead. The pure-Python module is the reference; both give the
same events in the same order (``tests/test_compiled_core.py``).

A chunk in flight is a :class:`Chunk`: ``hops`` as cached by ``CongestionNetwork._make_hops`` (``[messages sent, link,
trunc(L + m/B), trunc(m/B), link, ...]``) and ``pos`` the index of its current link in it. A link that
starts a chunk schedules two events, the chunk's arrival at the link's far end, then the link's free, in that order
(the reference's); the engine is called directly (its ``schedule``), so a folded engine still sees every event.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from astra_sim.engine import EventEngine


class Chunk:
    """One message on its route (typed: compiled, its position is a native int, not a list item boxed at each hop)."""

    __slots__ = ("hops", "pos", "fn", "arg", "free_ns")
    hops: list[int]
    pos: int
    free_ns: int  # when the link it last started on frees (read while that link serves it: see LinkQueues.arrive)

    def __init__(self, hops: list[int], fn: Any, arg: Any) -> None:
        self.hops = hops
        self.pos = -2  # (-2: "arriving" there, it enters its first link, position 1, like any hop)
        self.fn = fn
        self.arg = arg
        self.free_ns = -1


class LinkQueues:
    """Per-link busy flags and FIFO queues of the unfolded ``congestion`` network (``send``, ``arrive``, ``free``).

    ``network``: the :class:`~astra_network_congestion.congestion.CongestionNetwork` (its hop cache ``_hops``,
    ``_make_hops`` and per-link ``_max_queue``, updated here); ``link_load``: with a timeline asked for, every link's
    busy intervals are reported to its ``add(link, start_ns, end_ns)``.
    """

    __slots__ = ("engine", "busy", "queues", "serving", "max_queue", "cache", "make_hops", "link_load", "_arrive",
                 "_free", "last_dst", "last_size", "last_hops", "by_key")

    def __init__(self, network: Any, engine: EventEngine, n_links: int, link_load: Any = None) -> None:
        self.engine = engine
        self.busy: list[bool] = [False] * n_links
        self.queues: list[Any] = [None] * n_links  # a deque of waiting chunks, made on the link's first wait
        # the chunk the link serves (the last it started): its free_ns is the link's, not a boxed time per hop. A
        # chunk's next hop overwrites it only in the arrival event that runs just before that link's free (their
        # times equal when L + m/B and m/B truncate alike: scheduled one after the other), when nothing reads it
        self.serving: list[Any] = [None] * n_links
        self.max_queue: list[int] = network._max_queue
        self.cache: dict[tuple[int, int, int], list[int]] = network._hops
        self.make_hops: Callable[[int, int, int], list[int]] = network._make_hops
        self.link_load = link_load
        # per sender, the receiver and size of its last new message and their hops: a ring sends the same chunk to
        # the same neighbour at every step, found here without a (src, dst, size) tuple built, hashed and compared
        n_ranks = len(network.graph.rank_node)
        self.last_dst: list[int] = [-1] * n_ranks
        self.last_size: list[int] = [-1] * n_ranks
        self.last_hops: list[Any] = [None] * n_ranks
        # the hops of every (sender, receiver, size) sent by one int, ``(size * ranks + dst) * ranks + src``: a
        # sender whose receivers change (halving-doubling's partners) finds them without a tuple built, hashed and
        # compared (the same lists as the network's cache, whose first item counts the messages)
        self.by_key: dict[int, list[int]] = {}
        # the bound methods the engine calls, made once (not per event)
        self._arrive: Callable[[Chunk], None] = self.arrive
        self._free: Callable[[int], None] = self.free

    def send(self, src: int, dst: int, size: int, fn: Any, arg: Any) -> None:
        """Route ``size`` bytes from rank ``src`` to rank ``dst``; ``fn(arg)`` runs on arrival."""
        n = len(self.last_dst)
        known = 0 <= src < n
        if known and self.last_dst[src] == dst and self.last_size[src] == size:
            hops: list[int] = self.last_hops[src]
        else:
            key = (size * n + dst) * n + src if known and 0 <= dst < n and size >= 0 else -1
            found = self.by_key.get(key) if key >= 0 else None
            if found is not None:
                hops = found  # (the sender's last message is left as it was: its receivers change)
            else:
                cached = self.cache.get((src, dst, size))
                hops = self.make_hops(src, dst, size) if cached is None else cached
                if key >= 0:
                    self.by_key[key] = hops
                    self.last_dst[src] = dst
                    self.last_size[src] = size
                    self.last_hops[src] = hops
        hops[0] = hops[0] + 1  # (not +=: compiled, a generic in-place add)
        self.arrive(Chunk(hops, fn, arg))

    def arrive(self, chunk: Chunk) -> None:
        """The chunk reached the far end of its link: deliver it, or enter (or queue at) its next link."""
        hops = chunk.hops
        pos = chunk.pos + 3
        if pos == len(hops):
            # at the destination the delivery runs inside the arrival event (the reference's Chunk::invoke_callback)
            chunk.fn(chunk.arg)
            return
        chunk.pos = pos
        link = hops[pos]
        engine = self.engine
        if self.busy[link]:
            queue = self.queues[link]
            if queue is None:
                queue = self.queues[link] = deque()
            queue.append(chunk)
            max_queue = self.max_queue
            if len(queue) > max_queue[link]:  # (a new maximum needs a longer queue: the clock read only then)
                # waiting after this nanosecond's frees (the same whichever of them runs first)
                serving: Chunk = self.serving[link]
                waiting = len(queue) - (serving.free_ns == engine.now)
                if waiting > max_queue[link]:
                    max_queue[link] = waiting
            return
        self.busy[link] = True
        busy_ns = hops[pos + 2]
        chunk.free_ns = engine.now + busy_ns
        self.serving[link] = chunk
        if self.link_load is not None:
            self.link_load.add(link, engine.now, engine.now + busy_ns)
        engine.schedule(hops[pos + 1], self._arrive, chunk)
        engine.schedule(busy_ns, self._free, link)

    def free(self, link: int) -> None:
        """The link finished serializing its chunk: start the head of its queue, or go idle."""
        queue = self.queues[link]
        if not queue:
            self.busy[link] = False
            return
        chunk: Chunk = queue.popleft()
        # start it as send() starts a chunk on an idle link (the same lines, kept inline: this is the hot path)
        hops = chunk.hops
        pos = chunk.pos
        engine = self.engine
        busy_ns = hops[pos + 2]
        chunk.free_ns = engine.now + busy_ns
        self.serving[link] = chunk
        if self.link_load is not None:
            self.link_load.add(link, engine.now, engine.now + busy_ns)
        engine.schedule(hops[pos + 1], self._arrive, chunk)
        engine.schedule(busy_ns, self._free, link)
