"""What every simulated rank ran and when: one span (node id, start, end) per executed node, recorded only when a
plugin asks for it (:meth:`astra_sim.run.view.RunView.record_spans`).

Recording costs one array append per finished node (never per event) and only for the simulated ranks. What is
derived from the spans (views of any rank, a folded run's other ranks relabelled from their representative's, the
breakdown, timelines, the critical path) is the analysis plugin's (``plugins/analysis``, :mod:`astra_analysis.views`).
"""

from __future__ import annotations

from array import array

#: What a switch did in a recorded in-switch phase (the ``op`` of :meth:`SpanRecorder.in_switch_phase`): any
#: collective algorithm whose switches reduce or multicast records its phases with these codes.
IN_SWITCH_ALL_REDUCE, IN_SWITCH_REDUCE, IN_SWITCH_MULTICAST = range(3)
IN_SWITCH_OP_NAMES = ("in-switch reduce + multicast", "in-switch reduce", "in-switch multicast")


class SpanRecorder:
    """Per simulated rank a flat ``array('q')`` of ``node id, start ns, end ns`` triples, in finish order;
    and, for the phases of a collective that a switch reduces or multicasts (``inSwitch``), a second one of
    ``node id, op, dimensions (bit mask), bytes, start ns, end ns`` sextets (``op``: an ``IN_SWITCH_*`` code;
    the ``inSwitch`` algorithm lives in the network_analytical plugin)."""

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
