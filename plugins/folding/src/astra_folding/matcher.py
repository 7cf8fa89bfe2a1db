"""The send/receive matcher of a folded run (only class representatives are simulated)."""

from __future__ import annotations

from astra_sim.errors import SimulationError
from astra_sim.system.frontend import Message, SendRecvMatcher


class FoldedSendRecvMatcher(SendRecvMatcher):
    """The matcher of a folded run (:mod:`astra_folding`): only class representatives run.

    A message from a representative to a rank ``q`` that is not simulated is delivered, at the time the
    real one arrives, to ``q``'s representative, as coming from the rank that plays the sender's part
    there (the sender relabelled by the inverse of the relabelling that maps the representative to
    ``q``). The send side keeps the real endpoints, so the network times the real path. Every callback
    is shown to the engine's tie check (:class:`astra_folding.engine.FoldedEvents`) first."""

    __slots__ = ("symmetry",)

    def __init__(self, engine, network, symmetry):
        super().__init__(engine, network)
        self.symmetry = symmetry

    def send(self, src, dst, size, tag, fn, arg):
        if size <= 0:
            raise SimulationError(
                f"rank {src} sends a message of {size} bytes to rank {dst} (tag {tag}); sizes must be > 0"
            )
        symmetry = self.symmetry
        offsets = symmetry.offsets(dst)
        if any(offsets):
            key = (tag, symmetry.moved(src, offsets, -1), symmetry.moved(dst, offsets, -1), size)
        else:
            key = (tag, src, dst, size)
            offsets = None
        message = self._post_send(key, src, dst, size, fn, arg)
        message.route = (src, offsets)

    def _post_recv(self, key, dst, fn, arg):
        fold = self.engine.fold
        if fold.watched is not None:  # an unpaired arrival's tie at this nanosecond (ties.arrival_commutes)
            head = self._waiting.get(key)
            if head is not None and head.__class__ is not Message:
                head = head[0]
            if head is not None and head.posted and head.arrived:
                fold.paired(dst, head)
        super()._post_recv(key, dst, fn, arg)

    def _deliver_now(self, dst, fn, arg):
        self.engine.schedule(0, self._received_now, (dst, fn, arg))

    def _received_now(self, item):
        rank, fn, arg = item
        self.engine.fold.tie_check(rank, self.engine.current, (fn, arg))
        fn(arg)

    def _arrived(self, message):
        engine = self.engine
        context = engine.current
        sender, offsets = message.route
        if message.send_fn is not None:
            engine.fold.tie_check(sender, context, (message.send_fn, message.send_arg))
            message.send_fn(message.send_arg)
        # The receive side is the real message into the receiver's representative: its history is the
        # sender's relabelled by the inverse of the receiver's offsets.
        if offsets is not None:
            context = context.relabelled(self.symmetry, offsets)
        engine.fold.tie_check(message.key[2], context,
                              (message.recv_fn, message.recv_arg) if message.recv_fn is not None else message)
        if message.recv_fn is not None:
            message.recv_fn(message.recv_arg)
        else:
            message.arrived = True
