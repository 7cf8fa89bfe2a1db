"""The ``text`` workload format: ``astra run --workload-configuration FILE.txt`` converts in memory."""

from __future__ import annotations

import os

from astra_sim.errors import WorkloadError

# (the text module loads on first use: the format is registered for every run, and asked only when no other matches)


class TextFormat:
    """An ASTRA-sim 1.0 text workload (``.txt``), converted in memory for each rank.

    Every rank gets the same graph (ids from 0) in the ``astra-sim`` style of ``astra workload convert-text``,
    one pass. The transformer types place their model-parallel group on the network's dimensions, which a
    workload format does not see when it loads a rank: their collectives get ``involved_dim`` in
    :meth:`bind_network`, which the plugin's ``astra_run_start`` hook calls before the first event.
    """

    def __init__(self):
        self._graphs = {}
        self._pending = []  # (EtNode, 'model'|'data', TextWorkload)

    def matches(self, prefix):
        if not os.fspath(prefix).lower().endswith(".txt"):  # (every run asks: no import for a prefix that is not one)
            return False
        from .text import looks_like_text_workload

        return looks_like_text_workload(prefix)

    def load_rank(self, prefix, rank):
        from .text import build_graph, finalize, parse_text_file, rank_nodes

        key = os.path.abspath(os.fspath(prefix))
        entry = self._graphs.get(key)
        if entry is None:
            workload = parse_text_file(prefix)
            graph = finalize(build_graph(workload, num_passes=1, style="astra-sim"), elide=True)
            if not graph:
                raise WorkloadError(f"{workload.path}: the workload has no node left (every collective moves "
                                    "nothing and there is no compute)")
            entry = self._graphs[key] = (workload, graph)
        workload, graph = entry
        nodes, pending = rank_nodes(graph, style="astra-sim")
        self._pending.extend((node, role, workload) for node, role in pending)
        return workload.path, nodes

    def bind_network(self, npus_per_dim):
        """Give the transformer collectives their ``involved_dim`` for a network of ``npus_per_dim``."""
        from .text import _split_dims, model_parallel_boundary

        boundaries = {}
        for node, role, workload in self._pending:
            key = id(workload)
            if key not in boundaries:
                boundaries[key] = _split_dims(
                    model_parallel_boundary(workload.model_parallel_group, list(npus_per_dim), workload.path))
            model, data = boundaries[key]
            node.set_attr("involved_dim", list(model if role == "model" else data), "bool_list")
        self._pending.clear()
