"""Send/receive matching between ranks (the reference's analytical frontend).

A message is identified by ``(tag, src, dst, size)`` plus a sequence number
counted separately for sends and receives, so the k-th send of a key meets the
k-th receive. When a message arrives, the send handler runs first, then the
receive handler if one is posted; a receive posted after arrival runs at once
(through a zero-delay event).
"""

from __future__ import annotations

from astra_sim.errors import SimulationError

# Tag spaces, as in the reference: native send/recv, collectives, rendezvous.
NATIVE_TAG_BASE = 0
COLLECTIVE_TAG_BASE = 500_000_000
RENDEZVOUS_TAG_BASE = 1_000_000_000
RENDEZVOUS_BYTES = 8192


class _Entry:
    __slots__ = ("send_fn", "send_arg", "recv_fn", "recv_arg", "arrived", "has_send", "has_recv")

    def __init__(self):
        self.has_send = False
        self.has_recv = False
        self.arrived = False


class SendRecvMatcher:
    """Matches sends and receives and delivers them through a network backend."""

    __slots__ = ("engine", "network", "_entries", "_send_seq", "_recv_seq", "messages", "bytes")

    def __init__(self, engine, network):
        self.engine = engine
        self.network = network
        self._entries = {}
        self._send_seq = {}
        self._recv_seq = {}
        self.messages = 0
        self.bytes = 0

    def send(self, src, dst, size, tag, fn, arg):
        """Post a send; ``fn(arg)`` runs when the message has arrived at ``dst``."""
        if size <= 0:
            raise SimulationError(f"rank {src} sends a message of {size} bytes to rank {dst} (tag {tag}); sizes must be > 0")
        key = (tag, src, dst, size)
        seq = self._send_seq.get(key, 0)
        self._send_seq[key] = seq + 1
        full_key = (tag, src, dst, size, seq)
        entry = self._entries.get(full_key)
        if entry is None:
            entry = self._entries[full_key] = _Entry()
        entry.has_send = True
        entry.send_fn = fn
        entry.send_arg = arg
        self.messages += 1
        self.bytes += size
        self.network.send(src, dst, size, self._arrived, full_key)

    def recv(self, src, dst, size, tag, fn, arg):
        """Post a receive at ``dst``; ``fn(arg)`` runs when the matching message arrives."""
        key = (tag, src, dst, size)
        seq = self._recv_seq.get(key, 0)
        self._recv_seq[key] = seq + 1
        full_key = (tag, src, dst, size, seq)
        entry = self._entries.get(full_key)
        if entry is None:
            entry = self._entries[full_key] = _Entry()
            entry.has_recv = True
            entry.recv_fn = fn
            entry.recv_arg = arg
        elif entry.arrived:
            del self._entries[full_key]
            self.engine.schedule(0, fn, arg)
        else:
            entry.has_recv = True
            entry.recv_fn = fn
            entry.recv_arg = arg

    def _arrived(self, full_key):
        entry = self._entries[full_key]
        if entry.has_recv:
            del self._entries[full_key]
            entry.send_fn(entry.send_arg)
            entry.recv_fn(entry.recv_arg)
        else:
            entry.send_fn(entry.send_arg)
            entry.arrived = True

    def unmatched(self):
        """Messages still waiting: list of (tag, src, dst, size, what is missing)."""
        out = []
        for (tag, src, dst, size, _seq), entry in self._entries.items():
            if entry.has_recv and not entry.has_send:
                out.append((tag, src, dst, size, "receive posted, no send"))
            elif entry.has_send and not entry.arrived:
                out.append((tag, src, dst, size, "in flight"))
            elif entry.arrived and not entry.has_recv:
                out.append((tag, src, dst, size, "arrived, never received"))
        return out
