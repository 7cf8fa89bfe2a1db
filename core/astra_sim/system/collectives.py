"""What every collective algorithm builds on: the :class:`Algorithm` base, :class:`TimedCollective` and the
collective-type names the system layer uses.

An algorithm runs one phase of one chunk (a stream) on one rank. It reacts to three events: ``run_init``
(the stream was scheduled), ``run_general`` (a packet bundle finished its memory-bus and reduction delays)
and ``run_received`` (a message arrived). The algorithms themselves are plugins: the reference's native
ones (ring, direct, halving-doubling, double binary tree) live in ``plugins/collectives_native``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # the decorator only speaks to mypyc (tools/compile_core.py); a pure install has no mypy
    def mypyc_attr(*_args, **_kwargs):  # type: ignore[misc]
        return lambda cls: cls

if TYPE_CHECKING:
    from astra_sim.system.sys import Sys

#: What a communicator group's collectives run when the system config lists several implementations (the
#: reference's rule); the collectives_native plugin registers it.
GROUP_FALLBACK_ALGORITHM = "ring"

ALL_REDUCE: Final = "all_reduce"  # Final: a compiled module inlines them
ALL_GATHER: Final = "all_gather"
REDUCE_SCATTER: Final = "reduce_scatter"
ALL_TO_ALL: Final = "all_to_all"


@mypyc_attr(allow_interpreted_subclasses=True)
class Algorithm:
    """Shared fields: the stream it serves and the sizes the system layer reads.

    ``bind`` caches the rank's message and event functions and the bound
    methods used as callbacks: they are used for every packet. The subclass sets the three sizes (declared here
    so that a compiled Algorithm has them; plugins subclass it, compiled or not).
    """

    com_type: str
    data_size: int
    final_data_size: int
    #: the rank's system layer, typed: compiled, every packet's ``register_event`` is a native call (issue 37); None
    #: where compiled code is given a stand-in ``sys`` (tests), which the type check refuses: then ``_register``
    _sys_layer: Sys | None
    #: the last reduction's size and delay (an algorithm reduces one size over and over; the delay is a float formula)
    _reduced_size: int
    _reduced_ns: int

    __slots__ = (
        "stream", "sys", "com_type", "data_size", "final_data_size", "_sys_layer",
        "_send", "_recv", "_register", "_tag", "_bus_delay", "_general", "_received", "_reduce",
        "_reduced_size", "_reduced_ns",
    )

    def bind(self, stream):
        sys = stream.sys
        self.stream = stream
        self.sys = sys
        try:  # (not an import of Sys and an isinstance per phase: this is the check, compiled)
            self._sys_layer = sys
        except TypeError:
            self._sys_layer = None
        self._send = sys.msg_send
        self._recv = sys.msg_recv
        self._register = sys.register_event
        self._tag = stream.tag
        self._bus_delay = sys.endpoint_delay_ns
        self._general = self.run_general
        self._received = self.run_received
        self._reduce = self._reduce_then_general
        self._reduced_size, self._reduced_ns = -1, 0

    def bundle(self, size, processed: bool) -> None:
        """A packet bundle: endpoint delay, the reduction if ``processed``, then General."""
        sys = self._sys_layer
        if sys is None:
            if processed:
                self._register(self._reduce, size, self._bus_delay)
            else:
                self._register(self._general, None, self._bus_delay)
        elif processed:
            sys.register_event(self._reduce, size, self._bus_delay)
        else:
            sys.register_event(self._general, None, self._bus_delay)

    def _reduce_then_general(self, size: int) -> None:
        sys = self._sys_layer  # (typed: compiled, a native call; halving-doubling's size changes at every step)
        if size != self._reduced_size:
            self._reduced_ns = self.sys.reduction_delay_ns(size) if sys is None else sys.reduction_delay_ns(size)
            self._reduced_size = size
        if sys is None:
            self._register(self._general, None, self._reduced_ns)
        else:
            sys.register_event(self._general, None, self._reduced_ns)

    def finish(self) -> None:
        """This phase is over: the stream moves on.

        The cached bound methods refer back to this object; dropping them lets
        reference counting free it (the cyclic collector is paused during runs).
        """
        self._general = self._received = self._reduce = None
        self.sys.proceed_to_next_phase(self.stream)


@mypyc_attr(allow_interpreted_subclasses=True)
class TimedCollective(Algorithm):
    """A collective phase whose time comes from a model instead of packets (e.g. NCCL's cost model).

    Subclasses implement :meth:`duration_ns`; the phase waits that long (through the rank's
    per-tick batching) and finishes. ``nodes_in_ring`` is the number of ranks in the phase and
    :attr:`options` the run's options (after ``bind``).
    """

    __slots__ = ("rank", "topo", "nodes_in_ring", "time_ns")

    def __init__(self, com_type, rank, topo, data_size):
        self.com_type = com_type
        self.rank = rank
        self.topo = topo
        n = max(1, int(getattr(topo, "nodes_in_ring", 1)))
        self.nodes_in_ring = n
        self.data_size = data_size
        if com_type == ALL_GATHER:
            self.final_data_size = data_size * n
        elif com_type == REDUCE_SCATTER:
            self.final_data_size = data_size // n
        else:
            self.final_data_size = data_size
        self.time_ns = None

    @property
    def options(self) -> dict:
        """The run's options (``astra run`` flags by ``dest``, or ``simulate(options=...)``)."""
        options = self.sys.shared.options
        return options if isinstance(options, dict) else {}

    def duration_ns(self):
        raise NotImplementedError

    def run_init(self):
        self.time_ns = max(0, int(round(self.duration_ns())))
        self._register(self._timed_out, None, self.time_ns)

    def _timed_out(self, _arg=None):
        self.finish()

    def run_general(self, _arg=None):
        pass

    def run_received(self, _arg=None):
        pass
