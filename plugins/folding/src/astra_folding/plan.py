"""A run's fold decision: whether its backends allow folding at all, the symmetry its traces and
collectives keep (:mod:`astra_folding.search`), and what the report says about it (``fold_info``)."""

from __future__ import annotations

# The search, the folded engine and the matcher load when a run tries to fold: every run makes a planner, and one
# with --no-fold (or refused up front) needs none of them.

#: The folded engine's cost per event over the unfolded engine's: a folded event also carries its history for the
#: exactness check (:mod:`astra_folding.engine`) and its messages are mirrored (:mod:`astra_folding.matcher`). The
#: overhead is about fixed per event, so the factor depends on what an unfolded event costs. Measured with
#: benchmarks/bench_partial_fold.py (event-loop CPU seconds, min of 5 alternated runs, folds by 2 to 8; 2026-11-29 on
#: the project's shared 2-core machine; analytical and congestion within a few percent): 1.3-1.6x on generated LLM
#: steps (compact workloads) whose kernels the gpu compute model prices from their shapes (MoE, pipelines on
#: hgx-h100), 2.3-3.0x on hand-made per-rank traces whose kernels replay their durations. Runs of neither kind
#: take the larger factor, so that a fold never costs more than no fold.
FOLDED_EVENT_COST_PRICED = 1.6
FOLDED_EVENT_COST = 3.0
#: A fold must be expected to save at least this much (a fold by k costs about factor / k of no fold): the LLM steps'
#: folds by 2 measured 1.41-1.52x faster, the hand-made traces' folds by 3 1.13x.
FOLD_COST_MARGIN = 1.2


class FoldPlanner:
    """Decides the symmetry one run folds by.

    ``requested``: the user's ``fold``; ``refused``: why the run may not fold whatever its inputs (e.g.
    --astra-sim-log needs every rank's own nodes), or None. ``setup`` is the run's
    :class:`astra_sim.run.build.RunSetup`, ``catalogue`` its :class:`astra_sim.run.catalogue.CollectiveCatalogue`.
    After :meth:`plan` or :meth:`plan_compact`: ``symmetry`` (None when every rank is simulated),
    ``canonical_groups`` (communicator id -> the id its class's message tags count from) and ``info`` (the
    report's ``settings.fold``).

    ``event_cost``: the folded engine's cost per event over the unfolded one's (default: the measured factor of
    the run's kind, :func:`folded_event_cost`); a symmetry folds only when its order exceeds it
    by :data:`FOLD_COST_MARGIN`, since a fold by ``k`` simulates ``1/k`` of the events. 0 folds whenever a
    symmetry is found (tests and benchmarks of the fold itself)."""

    def __init__(self, setup, catalogue, requested, refused=None, event_cost=None):
        self.setup = setup
        self.catalogue = catalogue
        self.requested = bool(requested)
        self.refused = refused
        self.event_cost = event_cost  # None: the measured factor of the run's kind (folded_event_cost)
        self.symmetry = None
        self.canonical_groups = None
        self.info = {"requested": bool(requested), "simulated_ranks": None}

    @property
    def active(self):
        """Whether the run may try to fold (requested and not refused up front)."""
        return self.requested and self.refused is None

    def plan(self, traces):
        """Per-rank traces (``[path, nodes, signature or the entry it shares, key]``, as the builder reads
        them): the ranks to simulate. Each distinct trace gets a :class:`LazySignature`: the search digests
        traces only where they hold different node objects and only until they differ, so a run whose ranks all
        differ costs little."""
        return self._decide(lambda: self._find(traces))

    def plan_compact(self, compact, class_nodes):
        """A compact workload (its class traces and declared symmetry): the ranks to simulate."""
        return self._decide(lambda: self._declared(compact, class_nodes), compact=True)

    def _decide(self, make_plan, compact=False):
        total = self.setup.total_npus
        everyone = range(total)
        if not self.active:
            reason = self.refused or "folding disabled (--no-fold)"
            self.info.update(simulated_ranks=total, reason=reason)
            return everyone
        from astra_folding.groups import FoldRefused

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
        cost = folded_event_cost(self.setup.compute_model_name, compact) if self.event_cost is None else self.event_cost
        if symmetry.order <= cost * FOLD_COST_MARGIN:
            self.info.update(simulated_ranks=total, reason=(
                f"a fold by {symmetry.order} would be slower than simulating every rank: the folded engine "
                f"costs about {cost:g}x per event here (folds by more than {cost * FOLD_COST_MARGIN:g} pay off)"))
            return everyone
        self.symmetry = symmetry
        self.canonical_groups = plan.canonical_groups or None
        reps = symmetry.representatives(total)
        self.info.update(simulated_ranks=len(reps), ranks_per_class=symmetry.order,
                         generators=symmetry.describe(), group=symmetry.summary(), notes=plan.notes)
        return reps

    def fold_engine(self, engine):
        """Hand the (empty) engine's event order to the folded run's :class:`FoldedEvents` (the backends keep their
        reference to the engine, made before the fold was decided)."""
        from astra_folding.engine import FoldedEvents

        FoldedEvents.fold(engine, self.symmetry)

    def time_fold_driver(self, sim):
        """What runs the built simulation's engine when it may fold in time (``--time-fold``:
        :mod:`astra_folding.time_fold`), or None; the report's ``settings.fold.time`` says whether it jumped and why
        not."""
        if not self.active or not sim.options.get("time_fold"):
            return None
        from astra_folding.time_fold import TimeFolder, refusal

        info = self.info["time"] = {}
        reason = refusal(sim)
        if reason is not None:
            info.update(folded=False, reason=reason)
            return None
        return TimeFolder(sim, info).run

    def make_matcher(self, engine, network):
        """The folded run's send/receive matcher (messages to non-simulated ranks are mirrored). A network whose
        messages share links learns the symmetry first (:class:`astra_sim.api.LinkFoldingNetwork`)."""
        from astra_sim.api import LinkFoldingNetwork
        from astra_folding.matcher import FoldedSendRecvMatcher

        if isinstance(network, LinkFoldingNetwork):
            network.fold_links(self.symmetry)
        return FoldedSendRecvMatcher(engine, network, self.symmetry)

    # ------------------------------------------------------------ the search
    def _find(self, traces):
        from astra_folding.search import find_symmetry
        from astra_folding.signature import LazySignature, NodeCache

        kinds = self._preconditions()
        signatures = []
        cache = NodeCache()  # ranks share node objects (parse_et(shared=...)): each is read once
        for entry in traces:
            first = entry[2] if isinstance(entry[2], list) else entry  # a rank sharing another's parsed trace
            if first[2] is None:
                first[2] = LazySignature(first[1], cache)
            signatures.append(first[2])
        self._check_memory(signatures)
        native_impls, group_impl = self.catalogue.by_comm_type()
        setup = self.setup
        return find_symmetry(setup.npus_per_dim, kinds, signatures, setup.comm_groups or {}, native_impls,
                             group_impl)

    def _declared(self, compact, class_nodes):
        from astra_folding.search import check_declared_symmetry
        from astra_folding.signature import LazySignature, NodeCache

        kinds = self._preconditions()
        cache = NodeCache()  # only what the traces tell of their collectives is read: classes are equivariant
        signatures = [LazySignature(nodes, cache) for nodes in class_nodes.values()]
        self._check_memory(signatures)
        native_impls, group_impl = self.catalogue.by_comm_type()
        setup = self.setup
        return check_declared_symmetry(compact.symmetry, setup.npus_per_dim, kinds, signatures,
                                       setup.comm_groups or {}, native_impls, group_impl, class_nodes)

    def _preconditions(self):
        """The network's per-dimension symmetry kinds; FoldRefused when the backends cannot fold at all."""
        from astra_sim.api import is_foldable, symmetry_dims
        from astra_folding.groups import FoldRefused

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
        from astra_sim.api import is_foldable
        from astra_folding.groups import FoldRefused

        setup = self.setup
        if any(sig.uses_memory for sig in signatures) and not is_foldable(setup.memory):
            raise FoldRefused(f"remote memory ({setup.memory_backend_name}, "
                              f"{getattr(setup.memory, 'memory_type', 'shared')}) is shared between NPUs")


def folded_event_cost(compute_model, compact):
    """The measured cost per event of a folded run over an unfolded one: :data:`FOLDED_EVENT_COST_PRICED` for a
    compact workload whose kernels the gpu compute model prices, else :data:`FOLDED_EVENT_COST`."""
    return FOLDED_EVENT_COST_PRICED if compute_model == "gpu" and compact else FOLDED_EVENT_COST
