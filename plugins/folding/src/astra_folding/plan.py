"""A run's fold decision: whether its backends allow folding at all, the symmetry its traces and
collectives keep (:mod:`astra_folding.search`), and what the report says about it (``fold_info``)."""

from __future__ import annotations

from astra_sim.api import LinkFoldingNetwork, is_foldable, symmetry_dims
from astra_folding.engine import FoldedEventEngine
from astra_folding.matcher import FoldedSendRecvMatcher
from astra_folding.search import check_declared_symmetry, find_symmetry
from astra_folding.signature import TraceSignature, trace_signature
from astra_folding.groups import FoldRefused

#: The folded engine's cost per event over the unfolded engine's, per network backend: a folded event also
#: carries its history for the exactness check (:mod:`astra_folding.engine`) and its messages are mirrored
#: (:mod:`astra_folding.matcher`). Measured with benchmarks/bench_partial_fold.py (event-loop CPU seconds, min of
#: 5 alternated runs, folds by 2 to 8; 2026-11-29 on the project's shared 2-core machine): 2.3-3.0x on
#: hand-made traces whose events are cheap (collectives in many small messages), 1.3-1.6x on generated LLM steps
#: on hgx-h100 (MoE, pipelines), on both backends. The largest, so that a fold never costs more than no fold.
#: Backends not measured (they do not fold today) take the largest of these.
FOLDED_EVENT_COST = {"analytical": 3.0, "congestion": 3.0}
#: A fold must be expected to save at least this much: measurements on a shared machine vary by about this.
FOLD_COST_MARGIN = 1.25


class FoldPlanner:
    """Decides the symmetry one run folds by.

    ``requested``: the user's ``fold``; ``refused``: why the run may not fold whatever its inputs (e.g.
    --astra-sim-log needs every rank's own nodes), or None. ``setup`` is the run's
    :class:`astra_sim.run.build.RunSetup`, ``catalogue`` its :class:`astra_sim.run.catalogue.CollectiveCatalogue`.
    After :meth:`plan` or :meth:`plan_compact`: ``symmetry`` (None when every rank is simulated),
    ``canonical_groups`` (communicator id -> the id its class's message tags count from) and ``info`` (the
    report's ``settings.fold``).

    ``event_cost``: the folded engine's cost per event over the unfolded one's (default: the measured
    :data:`FOLDED_EVENT_COST` of the run's network backend); a symmetry folds only when its order exceeds it
    by :data:`FOLD_COST_MARGIN`, since a fold by ``k`` simulates ``1/k`` of the events. 0 folds whenever a
    symmetry is found (tests and benchmarks of the fold itself)."""

    def __init__(self, setup, catalogue, requested, refused=None, event_cost=None):
        self.setup = setup
        self.catalogue = catalogue
        self.requested = bool(requested)
        self.refused = refused
        self.event_cost = folded_event_cost(setup.network_backend_name) if event_cost is None else event_cost
        self.symmetry = None
        self.canonical_groups = None
        self.info = {"requested": bool(requested), "simulated_ranks": None}

    @property
    def active(self):
        """Whether the run may try to fold (requested and not refused up front)."""
        return self.requested and self.refused is None

    def plan(self, traces):
        """Per-rank traces (``[path, nodes, signature or the entry it shares, key]``, as the builder reads
        them): the ranks to simulate."""
        return self._decide(lambda: self._find(traces))

    def plan_compact(self, compact, class_nodes):
        """A compact workload (its class traces and declared symmetry): the ranks to simulate."""
        return self._decide(lambda: self._declared(compact, class_nodes))

    def _decide(self, make_plan):
        total = self.setup.total_npus
        everyone = range(total)
        if not self.active:
            reason = self.refused or "folding disabled (--no-fold)"
            self.info.update(simulated_ranks=total, reason=reason)
            return everyone
        try:
            plan = make_plan()
        except FoldRefused as exc:
            self.info.update(simulated_ranks=total, reason=str(exc))
            return everyone
        symmetry = plan.symmetry
        if symmetry.order == 1:
            reason = "; ".join(plan.notes) or "no symmetry found"
            self.info.update(simulated_ranks=total, reason=reason)
            return everyone
        if symmetry.order <= self.event_cost * FOLD_COST_MARGIN:
            self.info.update(simulated_ranks=total, reason=(
                f"a fold by {symmetry.order} would be slower than simulating every rank: the folded engine "
                f"costs about {self.event_cost:g}x per event (folds by more than "
                f"{self.event_cost * FOLD_COST_MARGIN:g} pay off)"))
            return everyone
        self.symmetry = symmetry
        self.canonical_groups = plan.canonical_groups or None
        reps = symmetry.representatives(total)
        self.info.update(simulated_ranks=len(reps), ranks_per_class=symmetry.order,
                         generators=symmetry.describe(), notes=plan.notes)
        return reps

    def fold_engine(self, engine):
        """Turn the (empty) engine into the folded run's engine, in place (backends keep their reference)."""
        FoldedEventEngine.fold(engine, self.symmetry)

    def make_matcher(self, engine, network):
        """The folded run's send/receive matcher (messages to non-simulated ranks are mirrored). A network whose
        messages share links learns the symmetry first (:class:`astra_sim.api.LinkFoldingNetwork`)."""
        if isinstance(network, LinkFoldingNetwork):
            network.fold_links(self.symmetry)
        return FoldedSendRecvMatcher(engine, network, self.symmetry)

    # ------------------------------------------------------------ the search
    def _find(self, traces):
        kinds = self._preconditions()
        signatures = []
        parts = {}  # node -> its part of a signature (ranks share node objects: parse_et(shared=...))
        for entry in traces:
            first = entry if entry[2] is None or isinstance(entry[2], TraceSignature) else entry[2]
            if not isinstance(first[2], TraceSignature):
                first[2] = trace_signature(first[1], parts)
            signatures.append(first[2])
        self._check_memory(signatures)
        native_impls, group_impl = self.catalogue.by_comm_type()
        setup = self.setup
        return find_symmetry(setup.npus_per_dim, kinds, signatures, setup.comm_groups or {}, native_impls,
                             group_impl)

    def _declared(self, compact, class_nodes):
        kinds = self._preconditions()
        parts = {}
        signatures = [trace_signature(nodes, parts) for nodes in class_nodes.values()]
        self._check_memory(signatures)
        native_impls, group_impl = self.catalogue.by_comm_type()
        setup = self.setup
        return check_declared_symmetry(compact.symmetry, setup.npus_per_dim, kinds, signatures,
                                       setup.comm_groups or {}, native_impls, group_impl, class_nodes)

    def _preconditions(self):
        """The network's per-dimension symmetry kinds; FoldRefused when the backends cannot fold at all."""
        setup = self.setup
        kinds = symmetry_dims(setup.network)
        if kinds is None:
            raise FoldRefused(f"network backend {setup.network_backend_name!r} keeps state shared between "
                              "messages (links, flows): ranks cannot be simulated apart")
        if len(kinds) != len(setup.npus_per_dim):
            raise FoldRefused(f"network backend {setup.network_backend_name!r} describes {len(kinds)} dimensions, "
                              f"the run has {len(setup.npus_per_dim)}")
        if not is_foldable(setup.compute_model):
            raise FoldRefused(f"compute model {setup.compute_model_name!r} does not declare rank-independent "
                              "timing (foldable)")
        if self.catalogue.has_custom:
            raise FoldRefused("custom collective implementations are not folded")
        return kinds

    def _check_memory(self, signatures):
        setup = self.setup
        if any(sig.uses_memory for sig in signatures) and not is_foldable(setup.memory):
            raise FoldRefused(f"remote memory ({setup.memory_backend_name}, "
                              f"{getattr(setup.memory, 'memory_type', 'shared')}) is shared between NPUs")


def folded_event_cost(backend_name):
    """The measured :data:`FOLDED_EVENT_COST` of a network backend (the largest measured for one not measured)."""
    cost = FOLDED_EVENT_COST.get(backend_name)
    return max(FOLDED_EVENT_COST.values()) if cost is None else cost
