"""What every rank's system layer and workload share (``Sys.shared``, ``RankWorkload.shared``; collective algorithms
read ``self.sys.shared``): the run's engine, configuration, backends, collective catalogue and the callbacks through
which they report back. Nothing else of the run reaches them.
"""

from __future__ import annotations

import math


class SharedContext:
    """The narrow context of the system and workload layers, built after the fold decision; plain slots (the hot
    path). ``plan_observers``: :meth:`astra_sim.run.view.RunView.add_plan_observer`'s; ``recorder``: the span
    recorder, if any; ``algorithm_state``: the one place collective algorithms keep state shared between ranks
    (keyed by algorithm, e.g. in-switch reductions waiting for their members)."""

    __slots__ = (
        # the machine and its backends
        "engine", "system_config", "npus_per_dim", "total_npus", "queues_per_dim", "rendezvous", "matcher",
        "network", "compute_model", "memory", "options",
        # the workload's communicators and host model
        "comm_groups", "group_stream_ids", "host_issue",
        # folding (None when every rank is simulated)
        "symmetry",
        # the collective catalogue (astra_sim.run.catalogue.CollectiveCatalogue)
        "algorithm_spec", "native_impls", "custom_impl", "check_dimensions_covered",
        # reporting back to the run
        "warn", "record_node", "rank_finished", "plan_observers", "recorder",
        "algorithm_state",
    )

    def __init__(self, *, engine, system_config, npus_per_dim, queues_per_dim, rendezvous, matcher, network,
                 compute_model, memory, options, comm_groups, group_stream_ids, host_issue, symmetry, catalogue,
                 warn, record_node, rank_finished):
        self.engine = engine
        self.system_config = system_config
        self.npus_per_dim = list(npus_per_dim)
        self.total_npus = math.prod(self.npus_per_dim)
        self.queues_per_dim = list(queues_per_dim)
        self.rendezvous = rendezvous
        self.matcher = matcher
        self.network = network
        self.compute_model = compute_model
        self.memory = memory
        self.options = options
        self.comm_groups = comm_groups
        self.group_stream_ids = group_stream_ids
        self.host_issue = host_issue
        self.symmetry = symmetry
        self.algorithm_spec = catalogue.algorithm_spec
        self.native_impls = catalogue.native_impls
        self.custom_impl = catalogue.custom_impl
        self.check_dimensions_covered = catalogue.check_dimensions_covered
        self.warn = warn
        self.record_node = record_node
        self.rank_finished = rank_finished
        self.plan_observers = []
        self.recorder = None
        self.algorithm_state = {}
