"""A ring's matcher channels (issue 37): every step of a ring sends to the same neighbour under the same
``(tag, src, dst, size)`` key, so the sender's and the receiver's ring share one :class:`Channel` that holds what the
matcher's ``_waiting[key]`` would (None, a Message, or a deque of them, all sends or all receives) and the key's
closed-form delay: a message is matched as ``SendRecvMatcher.send``/``recv`` match it (the k-th send meets the k-th
receive), without building, hashing or looking up a key. While a channel is open it is ``matcher.channels[key]``, so
plain sends and receives of the key go through it; when the last ring gives it back, its messages go back to the dict.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from astra_sim.system.frontend import Message, SendRecvMatcher


class Channel:
    """The messages of one key while rings post it (``users`` of them), and its delay (-1: the network's send, read
    when the channel opens: a backend sets its ``send`` before the run, as the congestion one does for a timeline)."""

    __slots__ = ("key", "src", "dst", "size", "size_object", "head", "users", "delay", "network_send")
    size: int  # (typed for the matcher's byte count; src, dst and size_object go to Python calls unboxed)
    users: int
    delay: int

    def __init__(self, key: tuple, head: Any, delay: int, network_send: Any) -> None:
        self.key = key
        self.src = key[1]
        self.dst = key[2]
        self.size = self.size_object = key[3]
        self.head: Any = head
        self.users = 0
        self.delay = delay
        self.network_send = network_send

    def send(self, m: SendRecvMatcher, fn: Any, arg: Any) -> Message:
        """``m.send`` of this key (``SendRecvMatcher._post_send`` with this slot instead of the dict's)."""
        head = self.head
        message: Message
        if head is None:
            message = self.head = Message(self.key, True, fn, arg, None, None)
        elif type(head) is Message:
            message = head  # (typed: compiled, its fields are read natively)
            if message.posted:
                message = Message(self.key, True, fn, arg, None, None)
                self.head = deque((head, message))
            else:
                self.head = None
                message.posted = True
                message.send_fn = fn
                message.send_arg = arg
        elif head[0].posted:
            message = Message(self.key, True, fn, arg, None, None)
            head.append(message)
        else:
            message = head.popleft()
            if not head:
                self.head = None
            message.posted = True
            message.send_fn = fn
            message.send_arg = arg
        m.messages += 1
        m.bytes += self.size
        if self.delay >= 0:
            m.engine.schedule(self.delay, m._arrived_fn, message)
        else:
            self.network_send(self.src, self.dst, self.size_object, m._arrived_fn, message)
        return message

    def recv(self, m: SendRecvMatcher, fn: Any, arg: Any) -> None:
        """``m.recv`` of this key (``SendRecvMatcher._post_recv`` with this slot)."""
        head = self.head
        message: Message
        if head is None:
            self.head = Message(self.key, False, None, None, fn, arg)
            return
        if type(head) is Message:
            message = head
            if not message.posted:
                self.head = deque((head, Message(self.key, False, None, None, fn, arg)))
                return
            self.head = None
        elif not head[0].posted:
            head.append(Message(self.key, False, None, None, fn, arg))
            return
        else:
            message = head.popleft()
            if not head:
                self.head = None
        if message.arrived:
            m._deliver_now(self.dst, fn, arg)
        else:
            message.recv_fn = fn
            message.recv_arg = arg


def open_channel(m: SendRecvMatcher, tag: Any, src: Any, dst: Any, size: Any) -> Channel:
    """The channel of ``(tag, src, dst, size)`` (size > 0), opened (taking over the key's waiting messages) by the
    first ring that asks; every ring that asks gives it back with :func:`close_channel`."""
    key = (tag, src, dst, size)
    channel: Channel | None = m.channels.get(key)  # (typed: compiled, its fields are read natively)
    if channel is None:
        waiting = m._waiting.pop(key, None) if m._waiting else None  # (mostly empty: no key hashed)
        delay = m.closed_form_ns(src, dst, size)
        channel = m.channels[key] = Channel(key, waiting, delay, m.network.send if delay < 0 else None)
    channel.users += 1
    return channel


def close_channel(m: SendRecvMatcher, channel: Channel) -> None:
    """A ring is done with ``channel``; once none uses it, its waiting messages go back to the matcher's dict."""
    channel.users -= 1
    if channel.users == 0:
        del m.channels[channel.key]
        if channel.head is not None:
            m._waiting[channel.key] = channel.head
