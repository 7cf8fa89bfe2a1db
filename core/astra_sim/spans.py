"""What every simulated rank ran and when: a span (node id, start, end) per finished node (one array append), recorded
only when a plugin asks (:meth:`astra_sim.run.view.RunView.record_spans`). What derives from them (other ranks' views,
the breakdown, timelines, the critical path) is the analysis plugin's.
"""

from __future__ import annotations

from array import array

#: What a switch did in a recorded in-switch phase (``op`` of :meth:`SpanRecorder.in_switch_phase`)
IN_SWITCH_ALL_REDUCE, IN_SWITCH_REDUCE, IN_SWITCH_MULTICAST = range(3)
IN_SWITCH_OP_NAMES = ("in-switch reduce + multicast", "in-switch reduce", "in-switch multicast")


class SpanRecorder:
    """Per simulated rank a flat ``array('q')`` of ``node id, start ns, end ns`` in finish order, and one of ``node id,
    op (IN_SWITCH_*), dimensions (bit mask), bytes, start ns, end ns`` for the phases a switch reduces or multicasts."""

    def __init__(self, ranks):
        self.spans = {rank: array("q") for rank in ranks}
        self.in_switch = {}

    def in_switch_phase(self, rank, node_id, op, dim, size_bytes, start_ns, end_ns):
        phases = self.in_switch.get(rank)
        if phases is None:
            phases = self.in_switch[rank] = array("q")
        phases.extend((node_id, op, dim, size_bytes, start_ns, end_ns))

    def observer(self):
        spans = self.spans

        def observe(rank, node, start_ns, end_ns):
            spans[rank].extend((node.id, start_ns, end_ns))

        return observe
