"""Send/receive matching between ranks (the reference's analytical frontend). A message is keyed by ``(tag, src,
dst, size)``; the k-th send of a key meets its k-th receive (the reference numbers them: two FIFO queues are the
same). On arrival the send handler runs, then the receive handler if posted; a later receive runs at once (a
zero-delay event).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final, NamedTuple

from astra_sim.api import delay_function
from astra_sim.engine import EventEngine
from astra_sim.errors import SimulationError

# Tag spaces, as in the reference: native send/recv, collectives, rendezvous (Final: a compiled module inlines them).
NATIVE_TAG_BASE: Final = 0
COLLECTIVE_TAG_BASE: Final = 500_000_000
RENDEZVOUS_TAG_BASE: Final = 1_000_000_000
RENDEZVOUS_BYTES: Final = 8192


class Message:
    """One send and (once matched) its receive."""

    __slots__ = ("key", "send_fn", "send_arg", "recv_fn", "recv_arg", "arrived", "posted", "route")
    arrived: bool  # typed for mypyc (tools/compile_core.py), as the matcher's hot attributes
    posted: bool

    def __init__(self, key, posted, send_fn, send_arg, recv_fn, recv_arg):
        self.key = key
        self.route = None  # folded runs: (real sender, offsets of the real receiver)
        self.posted = posted  # a send was posted for it
        self.send_fn = send_fn
        self.send_arg = send_arg
        self.recv_fn = recv_fn
        self.recv_arg = recv_arg
        self.arrived = False


class SendRecvMatcher:
    """Matches sends and receives and delivers messages through the network backend."""

    __slots__ = ("engine", "network", "_delay", "_delays", "_waiting", "messages", "bytes", "_arrived_fn", "channels")
    engine: EventEngine
    _delays: dict[tuple, int]
    _waiting: dict[tuple, Any]  # a Message or a deque of them
    channels: dict[tuple, Any]
    messages: int
    bytes: int

    def __init__(self, engine, network) -> None:  # annotated for mypyc (a compiled subclass calls it)
        self.engine = engine
        self.network = network
        # A stateless network's closed-form delay: the matcher schedules arrivals itself (a call less per message)
        self._delay = delay_function(network)
        self._delays = {}  # (src, dst, size) -> ns, memoised closed-form delays
        self._arrived_fn = self._arrived
        # key -> the unmatched Message, or a deque of them (see send()).
        self._waiting = {}
        # key -> what holds its messages instead of _waiting while a ring posts it (astra_collectives_native.channel)
        self.channels = {}
        self.messages = self.bytes = 0

    def send(self, src, dst, size, tag, fn, arg) -> None:
        """Post a send; ``fn(arg)`` (if fn is not None) runs when the message has arrived at ``dst``."""
        if size <= 0:
            raise SimulationError(
                f"rank {src} sends a message of {size} bytes to rank {dst} (tag {tag}); sizes must be > 0"
            )
        self._post_send((tag, src, dst, size), src, dst, size, fn, arg)

    def _post_send(self, key, src, dst, size, fn, arg) -> Message:
        """Post a send whose receive side is ``key`` and deliver it from ``src`` to ``dst``."""
        waiting = self._waiting
        head = waiting.get(key)
        # ``waiting[key]``: one unmatched Message or, rarely, a deque of them, all sends or all receives
        if head is None:
            if self.channels and key in self.channels:
                return self.channels[key].send(self, fn, arg)
            message = waiting[key] = Message(key, True, fn, arg, None, None)
        elif type(head) is Message:
            if head.posted:
                message = Message(key, True, fn, arg, None, None)
                waiting[key] = deque((head, message))
            else:
                message = head
                del waiting[message.key]  # (the dict's own key object: found by identity, no tuples compared)
                message.posted = True
                message.send_fn = fn
                message.send_arg = arg
        elif head[0].posted:
            message = Message(key, True, fn, arg, None, None)
            head.append(message)
        else:
            message = head.popleft()
            if not head:
                del waiting[key]
            message.posted = True
            message.send_fn = fn
            message.send_arg = arg
        self.messages += 1
        nbytes: int = size  # (typed: compiled, a native add; size itself goes on to Python calls as it came)
        self.bytes += nbytes
        if self._delay is None:
            self.network.send(src, dst, size, self._arrived_fn, message)
            return message
        delay = self._delays.get((src, dst, size))
        if delay is None:
            delay = self.closed_form_ns(src, dst, size)
        self.engine.schedule(delay, self._arrived_fn, message)
        return message

    def closed_form_ns(self, src, dst, size) -> int:
        """The stateless network's delay from ``src`` to ``dst`` (checked, memoised), or -1: it has none."""
        if self._delay is None:
            return -1
        delay = self._delays.get((src, dst, size))
        if delay is not None:
            return delay
        delay = self._delay(src, dst, size)
        if delay.__class__ is not int or delay < 0:
            raise SimulationError(
                f"network backend returned {delay!r} ns for {size} bytes {src} -> {dst}; "
                "delays must be integer nanoseconds >= 0"
            )
        self._delays[(src, dst, size)] = delay
        return delay

    def recv(self, src, dst, size, tag, fn, arg) -> None:
        """Post a receive at ``dst``; ``fn(arg)`` runs when the matching message arrives."""
        self._post_recv((tag, src, dst, size), dst, fn, arg)

    def _post_recv(self, key, dst, fn, arg) -> None:
        waiting = self._waiting
        head = waiting.get(key)
        if head is None:
            if self.channels and key in self.channels:
                self.channels[key].recv(self, fn, arg)
                return
            waiting[key] = Message(key, False, None, None, fn, arg)
            return
        if type(head) is Message:
            if not head.posted:
                waiting[key] = deque((head, Message(key, False, None, None, fn, arg)))
                return
            message = head
            del waiting[message.key]  # (as in _post_send)
        elif not head[0].posted:
            head.append(Message(key, False, None, None, fn, arg))
            return
        else:
            message = head.popleft()
            if not head:
                del waiting[key]
        if message.arrived:
            self._deliver_now(dst, fn, arg)
        else:
            message.recv_fn = fn
            message.recv_arg = arg

    def _deliver_now(self, dst, fn, arg) -> None:
        """A receive posted after its message arrived completes at once (a zero-delay event)."""
        self.engine.schedule(0, fn, arg)

    def _arrived(self, message: Message) -> None:
        if message.send_fn is not None:
            message.send_fn(message.send_arg)
        if message.recv_fn is not None:
            message.recv_fn(message.recv_arg)
        else:
            message.arrived = True

    def unmatched(self):
        """The messages still waiting, as :class:`Unmatched`, in the order their keys were first posted."""
        out = []
        heads = [*self._waiting.items(), *((key, c.head) for key, c in self.channels.items() if c.head is not None)]
        for (tag, src, dst, size), head in heads:
            for message in ([head] if head.__class__ is Message else head):
                if not message.posted:
                    what = "receive posted, no send"
                elif message.arrived:
                    what = "arrived, never received"
                else:
                    what = "in flight, no receive posted"
                out.append(Unmatched(tag, src, dst, size, what, message))
        return out


class Unmatched(NamedTuple):
    """A message left without its other half when the run ended (see :meth:`SendRecvMatcher.unmatched`)."""

    tag: int
    src: int
    dst: int
    size: int
    what: str
    message: Message
