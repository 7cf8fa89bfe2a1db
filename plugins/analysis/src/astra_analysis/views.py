"""Views of any rank over the spans the kernel records (:mod:`astra_sim.spans`), what every analysis of this plugin
reads.

Every other rank of a folded run does what its class representative does with peers and communicator groups
relabelled (:mod:`astra_folding.symmetry`), so :class:`RankView` serves it from the representative's spans: node ids and
times are the representative's, peers are moved by the rank's offsets and groups are mapped to their images (the
rule of ``docs/compact-workload.md``).
"""

from __future__ import annotations

import json
import os

from astra_sim.chakra import types as T
from astra_sim.ops import op_class
from astra_workload_compact import roles_path

#: What a node does, for the breakdown, the critical path and the timeline tracks.
K_COMPUTE, K_CPU, K_COLL, K_SEND, K_RECV, K_MEM, K_INSTANT = range(7)
KIND_NAMES = ("compute", "cpu", "collective", "send", "recv", "remote_memory", "instant")
#: ``pg_name`` values of the default all-NPU group (the workload layer's rule)
_DEFAULT_PG = ("", "0", None, 0)
#: communicator keys that are no group of the groups file: the default group, and point-to-point
#: messages between ranks that share no group
WORLD, P2P = 0, -1


def analysis_of(run):
    """The :class:`Analysis` of a run (its read-only ``RunView``) after its last event, built once and kept in
    ``run.plugin_state["analysis"]``; None when the run recorded no spans (nothing called ``run.record_spans()``)."""
    if run.spans is None:
        return None
    state = run.plugin_state.setdefault("analysis", {})
    if "analysis" not in state:
        state["analysis"] = Analysis(run)
    return state["analysis"]


def node_kind(node):
    if node.attrs.get("is_cpu_op"):
        return K_CPU
    t = node.type
    if t == T.COMP_NODE:
        return K_COMPUTE
    if t == T.COMM_COLL_NODE:
        return K_COLL
    if t == T.COMM_SEND_NODE:
        return K_SEND
    if t == T.COMM_RECV_NODE:
        return K_RECV
    if t in (T.MEM_LOAD_NODE, T.MEM_STORE_NODE):
        return K_MEM
    return K_INSTANT


def node_group(node):
    """The communicator group id a node names (``WORLD`` for the default group)."""
    pg = node.attrs.get("pg_name")
    if pg in _DEFAULT_PG:
        return WORLD
    try:
        return int(pg)
    except (TypeError, ValueError):
        return WORLD


def read_roles(groups_path):
    """``{group id: role}`` from the roles file beside the groups file ({} when there is none)."""
    if groups_path is None:
        return {}
    path = roles_path(groups_path)
    if not os.path.isfile(path):
        return {}
    from astra_sim.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the communicator roles: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ConfigError(f"{path}: must map group ids to role names, e.g. {{\"1\": \"tp\"}}")
    try:
        return {int(k): v for k, v in data.items()}
    except ValueError:
        raise ConfigError(f"{path}: group ids must be integers") from None


class Communicators:
    """Names communicators: a group's role (``tp``, ``dp``, ...) when the groups file has a roles file,
    else ``group N``; ``world`` for the default group; a point-to-point message belongs to the smallest
    group holding both ranks (ties: the lowest id), else ``p2p``."""

    def __init__(self, groups, roles):
        self.groups = groups or {}
        self.roles = roles or {}
        self._member_of = None
        self._pairs = {}

    def label(self, group_id):
        if group_id == WORLD:
            return "world"
        if group_id == P2P:
            return "p2p"
        return self.roles.get(group_id) or f"group {group_id}"

    def pair_group(self, a, b):
        key = (a, b) if a < b else (b, a)
        found = self._pairs.get(key)
        if found is None:
            if self._member_of is None:
                member_of = {}
                for gid in sorted(self.groups):
                    for rank in self.groups[gid]:
                        member_of.setdefault(rank, []).append(gid)
                self._member_of = member_of
            both = set(self._member_of.get(b, ()))
            shared = [g for g in self._member_of.get(a, ()) if g in both]
            found = min(shared, key=lambda g: (len(self.groups[g]), g)) if shared else P2P
            self._pairs[key] = found
        return found


class Analysis:
    """Everything derived from a run's spans (:func:`analysis_of`); ``run`` is the run's read-only ``RunView``."""

    def __init__(self, run):
        self.run = run
        self.recorder = run.spans
        self.symmetry = run.symmetry
        self.total = run.total_npus
        self.communicators = Communicators(run.comm_groups, read_roles(run.comm_group_path))
        self._relabeller = None
        self._kinds = {}  # (representative, node id) -> (kind, group key)
        self._classes = {}
        self._views = {}
        self.per_communicator = run.system_config.comm_streams == "per-communicator"

    # -- ranks --------------------------------------------------------------------------------------
    def view(self, rank):
        view = self._views.get(rank)
        if view is None:
            if len(self._views) > 4096:
                self._views.clear()
            view = self._views[rank] = RankView(self, rank)
        return view

    def group_image(self, group_id, offsets):
        """The id of the group that ``group_id`` becomes for the rank at ``offsets`` from its representative."""
        if group_id <= 0 or not any(offsets):
            return group_id
        if self._relabeller is None:
            from astra_workload_compact import Relabeller

            self._relabeller = Relabeller(self.symmetry, self.run.comm_groups, self.run.workload_prefix)
        return self._relabeller.group_image(group_id, offsets)

    # -- nodes of a representative (cached) --------------------------------------------------------------
    def kind_of(self, rep, node):
        """``(kind, communicator key)`` of a representative's node; the key is the group id for collectives
        and messages that name a group, the smallest group holding both ranks for other messages."""
        key = (rep, node.id)
        found = self._kinds.get(key)
        if found is None:
            kind = node_kind(node)
            comm = None
            if kind in (K_COLL, K_SEND, K_RECV):
                comm = node_group(node)
                if kind != K_COLL and comm == WORLD:
                    peer = node.attrs.get("comm_dst" if kind == K_SEND else "comm_src")
                    comm = self.communicators.pair_group(rep, peer) if isinstance(peer, int) else P2P
            found = self._kinds[key] = (kind, comm)
        return found

    def op_class(self, rep, node):
        """GEMM / attention / elementwise / other, from the compute model (``op_class``) or the name
        (:func:`astra_sim.ops.op_class`). Kept per node object: the ranks of one trace class share their compute
        nodes (an unfolded run of a compact workload relabels only the communication nodes), so each is classified
        once, not once per rank."""
        key = id(node)  # the node lives as long as the run, and this analysis with it
        found = self._classes.get(key)
        if found is None:
            classify = getattr(self.run.compute_model, "op_class", None)
            found = classify(node, rep) if classify is not None else None
            if found is None:
                found = op_class(node.name)
            self._classes[key] = found
        return found


class RankView:
    """One rank seen through its representative's spans (see the module docstring)."""

    __slots__ = ("analysis", "rank", "rep", "offsets", "nodes", "spans", "finish_ns", "_images")

    def __init__(self, analysis, rank):
        run = analysis.run
        symmetry = analysis.symmetry
        rep = symmetry.representative(rank) if symmetry is not None else rank
        self.analysis = analysis
        self.rank = rank
        self.rep = rep
        self.offsets = symmetry.offsets(rank) if symmetry is not None else ()
        self.nodes = run.rank_nodes(rep)
        self.finish_ns = run.rank_finish_ns(rep)
        self.spans = analysis.recorder.spans[rep]
        self._images = {}

    def moved(self, other_rank):
        """A rank named in the representative's trace, as this rank names it."""
        if other_rank is None or not any(self.offsets):
            return other_rank
        return self.analysis.symmetry.moved(other_rank, self.offsets)

    def group(self, group_key):
        """A representative's communicator key as this rank's (group ids mapped to their images)."""
        if group_key is None or group_key <= 0 or not any(self.offsets):
            return group_key
        image = self._images.get(group_key)
        if image is None:
            image = self._images[group_key] = self.analysis.group_image(group_key, self.offsets)
        return image

    def kind(self, node):
        kind, comm = self.analysis.kind_of(self.rep, node)
        return kind, self.group(comm)

    def peer(self, node):
        """The other end of a send (destination) or receive (source), as this rank names it."""
        attrs = node.attrs
        value = attrs.get("comm_dst") if node.type == T.COMM_SEND_NODE else attrs.get("comm_src")
        return self.moved(value) if isinstance(value, int) and not isinstance(value, bool) else None

    def records(self):
        """``(node, start, end)`` for every executed node, in finish order."""
        nodes = self.nodes
        spans = self.spans
        for i in range(0, len(spans), 3):
            yield nodes[spans[i]], spans[i + 1], spans[i + 2]

    def in_switch_phases(self):
        """``(collective node, op, dimensions bit mask, bytes, start, end)`` for every in-switch phase the rank ran
        (none without ``inSwitch``), in finish order."""
        phases = self.analysis.recorder.in_switch.get(self.rep)
        if not phases:
            return
        nodes = self.nodes
        for i in range(0, len(phases), 6):
            node = nodes.get(phases[i])
            if node is not None:
                yield node, phases[i + 1], phases[i + 2], phases[i + 3], phases[i + 4], phases[i + 5]
