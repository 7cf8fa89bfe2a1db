"""A ring's matcher channel (astra_collectives_native.channel, issue 37) matches as the matcher's dict does: the k-th
send of a key meets its k-th receive whoever posts them, a key's messages waiting in the dict move into the channel
when it opens and back when the last ring closes it, and the run's unmatched report sees them either way."""

from __future__ import annotations

from astra_sim.engine import EventEngine
from astra_sim.system.frontend import SendRecvMatcher

from astra_collectives_native.channel import close_channel, open_channel


class _Fixed:
    """A stateless network: 100 ns per message."""

    def delay_ns(self, src, dst, size):
        return 100

    def send(self, src, dst, size, fn, arg):  # pragma: no cover - the matcher schedules closed-form delays itself
        raise AssertionError("a closed-form network's send is never called")


def test_a_channel_matches_in_the_dicts_order_and_hands_its_messages_back():
    engine = EventEngine()
    m = SendRecvMatcher(engine, _Fixed())
    seen = []
    m.send(0, 1, 64, 7, seen.append, "sent 1")  # waits in the dict before any ring asks for the key
    a, b = open_channel(m, 7, 0, 1, 64), open_channel(m, 7, 0, 1, 64)  # the sender's ring and the receiver's
    assert a is b and a.users == 2 and a.delay == 100 and (7, 0, 1, 64) not in m._waiting
    a.recv(m, seen.append, "received 1")  # meets the plain send
    a.send(m, seen.append, "sent 2")
    m.recv(0, 1, 64, 7, seen.append, "received 2")  # a plain receive of the key goes through the channel
    a.send(m, seen.append, "sent 3")  # no receive for it yet
    close_channel(m, a)
    assert m.channels and [u.what for u in m.unmatched()] == ["in flight, no receive posted"]
    close_channel(m, b)
    assert not m.channels and (7, 0, 1, 64) in m._waiting  # back in the dict
    engine.run()
    assert seen == ["sent 1", "received 1", "sent 2", "received 2", "sent 3"]
    assert m.messages == 3 and m.bytes == 192 and engine.now == 100
    m.recv(0, 1, 64, 7, seen.append, "received 3")  # the third send, arrived, is received at once
    engine.run()
    assert seen[-1] == "received 3" and not m._waiting and m.unmatched() == []
