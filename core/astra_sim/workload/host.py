"""The host that launches a rank's GPU ops (run options host_launch_us / host_sync_us), in the trace's order.

A generator emits nodes in its program's order (the LLM generator's ``llm/emit.py`` ``_add``: ``nid =
len(self.items)``), so the host walks the GPU ops in id order, as Megatron posts each pipeline receive at its
place in the schedule: one launch of ``launch_ns`` per op (a CUDA graph, numbered in trace order, once); after
launching an op marked ``host_waits`` it waits for the op to complete, then ``sync_ns`` more. An op is dispatched
at max(its issue, its launch). The walk is lazy: it goes as far as the op being issued, or the next op ``held``.

``held``: the GPU ops issued at the rank's start (a trace's receives without parents: the LLM generator posts them
all there). They wait out of the engine, in id order, and one wake-up event of the rank launches the next of them
at its launch time. Which of them lie ahead of the host is a function of its position alone (the trace, not the
state: time folding compares the position instead of thousands of far-off launches).
"""

from __future__ import annotations


class Host:
    """One rank's host: where its walk over the GPU ops is and what waits for it."""

    __slots__ = ("launch_ns", "sync_ns", "ops", "graphs", "waits", "last_wait", "next", "clock", "graph", "at",
                 "blocked", "pending", "held", "held_next", "wake", "starting")

    def __init__(self, issue, nodes, gpu_ops):
        self.launch_ns, self.sync_ns = issue
        self.ops = sorted(i for i, n in nodes.items() if n.type in gpu_ops)  # the walk's order
        self.graphs = [nodes[i].attrs.get("cuda_graph") for i in self.ops]
        self.waits = frozenset(i for i in self.ops if nodes[i].attrs.get("host_waits"))
        self.last_wait = max((k for k, i in enumerate(self.ops) if i in self.waits), default=-1)  # its index in ops
        self.next = 0  # index in ops of the next op the walk passes
        self.clock = 0  # the launch time of the last op passed (then the end of a wait plus sync_ns)
        self.graph = 0  # the last CUDA graph launched
        self.at = {}  # op -> launch time: ops passed, not dispatched yet (a due one may be dropped: see due)
        self.blocked = None  # the host_waits op launched that the host waits for
        self.pending = {}  # op -> slot: issued ops the host has not reached (it waits before them)
        self.held = []  # the ops issued at the start, in id order; held[held_next:] wait for their launch
        self.held_next = 0
        self.wake = None  # the held op the rank's pending wake-up event launches, or None
        self.starting = False

    def passed(self, op):
        """Whether the walk has passed ``op``."""
        return self.next > 0 and op <= self.ops[self.next - 1]

    def walk(self, op):
        """Walk to ``op`` (not passed yet), noting each op's launch time in ``at``: ``op``'s, or None when the host
        waits at a host_waits op before it."""
        ops, graphs, at = self.ops, self.graphs, self.at
        i, clock, graph, end, launch = self.next, self.clock, self.graph, len(self.ops), self.launch_ns
        while i < end and ops[i] <= op:
            x, g = ops[i], graphs[i]
            i += 1
            if g is None or g > graph:
                clock += launch
                if g is not None:
                    graph = g
            at[x] = clock
            if x in self.waits:
                self.blocked = x
                break
        self.next, self.clock, self.graph = i, clock, graph
        return at.get(op)

    def launch_of(self, op):
        """The launch time of ``op``, issued now and not held (0: launched long ago), popped from ``at``; None when
        the host waits before it."""
        launched = self.at.pop(op, None)
        if launched is not None:
            return launched
        if self.passed(op):
            return 0  # its launch was dropped as due (at or before a time gone by)
        if self.blocked is not None or self.walk(op) is None:
            return None
        return self.at.pop(op)

    def resume(self, now):
        """The op the host waited for completed (now): it launches on ``sync_ns`` later."""
        self.clock = max(self.clock, now + self.sync_ns)
        self.blocked = None

    def next_held(self):
        """(the next held op (one is left), its launch time or None while the host waits before it)."""
        op = self.held[self.held_next]
        launched = self.at.get(op)
        if launched is None and self.blocked is None:
            launched = self.walk(op)
        return op, launched
