"""Scale-out fabrics from a few parameters: rail-optimised and multi-plane two-tier fat trees.

``astra run --fabric SPEC`` (run option ``fabric``) builds the network that the ``flow`` and ``congestion``
backends run from the analytical YAML's numbers (a platform's: dimension 0 the node's scale-up Switch,
dimension 1 the scale-out Switch with one member per node) and a spec such as
``rail:nodes_per_leaf=16:over=2`` or ``planes:planes=2:nic_gbps=800``:

* ``rail``: rail-optimised. GPU ``i`` of every node plugs into a leaf switch of rail ``i``; the nodes are split
  in order into leaves of ``nodes_per_leaf``; every leaf of every rail has one uplink to each of the spine
  switches (shared by all rails). Two GPUs on one rail's leaf talk through that leaf only; any other pair of
  nodes crosses leaf -> spine -> leaf (ECMP over the spines).
* ``planes``: ``planes`` independent copies of that fabric (no switch shared between planes); every GPU's NIC
  has one port on each plane at ``nic_gbps / planes``. On ``flow`` a message is sprayed over the planes (and
  spines), as a multi-plane NIC sprays its packets (``--flow-ecmp split``, the default for this kind;
  ``--flow-ecmp hash`` puts each message on one plane); ``congestion`` takes one plane per pair by hash.

Per plane, a leaf's uplink capacity is its downlink capacity over ``over`` (the oversubscription), spread over
``spines`` switches (default ``ceil(nodes_per_leaf / over)``: one uplink per spine at the port speed when that
divides). Latency: the YAML's scale-out latency on each NIC-to-leaf link (two per crossing, as the
analytical Switch's two hops); leaf-spine links add none, so a lone message takes what it takes on the
analytical Switch. The spine layer is one tier of unlimited radix (a real fabric past a spine's radix adds a
third tier, not modelled). GPUs of one node talk over the scale-up switch (dimension 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from astra_sim.errors import ConfigError

from astra_network_congestion.builders import SWITCH_TOPOLOGY, npu_name
from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph

GIB = 1 << 30
KINDS = ("rail", "planes")
#: spec keys -> FabricSpec fields (``over`` is short for ``oversubscription``)
KEYS = {"nodes_per_leaf": "nodes_per_leaf", "over": "oversubscription", "oversubscription": "oversubscription",
        "nic_gbps": "nic_gbit_per_s", "planes": "planes", "spines": "spines"}
#: without ``nodes_per_leaf`` and without a platform's default: half the ports of a 64-port NDR leaf down
#: (source: NVIDIA Quantum-2 QM9700, 64 ports of 400 Gb/s NDR; itctshop.com/infiniband-switch-guide)
DEFAULT_NODES_PER_LEAF = 32
SYNTAX = "KIND[:key=value...] with KIND rail or planes and keys " + ", ".join(sorted(set(KEYS) - {"oversubscription"}))


@dataclass(frozen=True)
class FabricSpec:
    """A fabric's parameters; None fields take the platform's default (``nodes_per_leaf``), the network YAML's
    scale-out bandwidth (``nic_gbit_per_s``, Gb/s per GPU, decimal) or ``ceil(nodes_per_leaf / over)``
    (``spines``, per plane)."""

    kind: str = "rail"
    nodes_per_leaf: int | None = None
    oversubscription: float = 1.0
    nic_gbit_per_s: float | None = None
    planes: int = 1
    spines: int | None = None


def parse_fabric(text, where="--fabric") -> FabricSpec:
    """``KIND[:key=value...]`` as a FabricSpec; anything else is a one-line ConfigError naming ``where``."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: expected {SYNTAX}, got {text!r}")
    kind, *pairs = [part.strip() for part in text.strip().split(":")]
    if kind not in KINDS:
        raise ConfigError(f"{where}: unknown fabric kind {kind!r}; expected one of {', '.join(KINDS)} ({SYNTAX})")
    fields = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in KEYS:
            raise ConfigError(f"{where}: {pair!r} is not key=value with a key of {', '.join(KEYS)} ({SYNTAX})")
        name = KEYS[key]
        if name in fields:
            raise ConfigError(f"{where}: key {key!r} is given twice")
        fields[name] = _value(where, key, name, value)
    if kind == "rail" and fields.get("planes", 1) != 1:
        raise ConfigError(f"{where}: planes= is for kind planes (rail has one plane), got planes={fields['planes']}")
    if kind == "planes":
        fields.setdefault("planes", 2)
        if fields["planes"] < 2:
            raise ConfigError(f"{where}: kind planes needs planes >= 2, got planes={fields['planes']}")
    return FabricSpec(kind=kind, **fields)


def _value(where, key, name, text):
    """One spec value: integers for counts, finite numbers for rates and ratios."""
    if name in ("nodes_per_leaf", "planes", "spines"):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < 1:
            raise ConfigError(f"{where}: {key} expects an integer >= 1, got {text!r}")
        return value
    try:
        value = float(text)
    except ValueError:
        value = None
    low = 1.0 if name == "oversubscription" else 0.0
    if value is None or not math.isfinite(value) or value < low or (name == "nic_gbit_per_s" and value <= 0):
        what = "a number >= 1 (a leaf's downlink over its uplink capacity)" if low else "a number > 0 (Gb/s per GPU)"
        raise ConfigError(f"{where}: {key} expects {what}, got {text!r}")
    return value


def fabric_from_options(options):
    """The run's FabricSpec (option ``fabric``: a spec string or a FabricSpec), its ``nodes_per_leaf`` filled from
    option ``fabric_defaults`` (a platform's default fabric) or :data:`DEFAULT_NODES_PER_LEAF`; None without one."""
    options = options or {}
    spec = options.get("fabric")
    if spec is None:
        return None
    if not isinstance(spec, FabricSpec):
        spec = parse_fabric(spec, "option fabric")
    if options.get("fabric_nodes_per_leaf") is not None:
        raise ConfigError("option fabric: give either a fabric (--fabric) or fabric_nodes_per_leaf (astra cluster's "
                          "fabric: key), not both")
    if spec.nodes_per_leaf is None:
        default = (options.get("fabric_defaults") or {}).get("nodes_per_leaf") or DEFAULT_NODES_PER_LEAF
        spec = FabricSpec(spec.kind, int(default), spec.oversubscription, spec.nic_gbit_per_s, spec.planes,
                          spec.spines)
    return spec


@dataclass
class Fabric:
    """A built fabric: the graph, a routing function for the ``congestion`` backend (ECMP by a fixed hash of the
    pair over planes and spines) and its description for the report."""

    graph: NetworkGraph
    route_fn: object
    description: dict


@dataclass(frozen=True)
class Layout:
    """The numbers of a fabric over a network's nodes (bandwidths in GiB/s, the analytical YAML's unit)."""

    gpus: int            # GPUs per node (rails)
    nodes: int
    scaleup_gib: float   # per GPU per direction, dimension 0 (unused with one GPU per node)
    scaleup_ns: float
    nic_gib: float       # per GPU, all planes
    port_gib: float      # per GPU per plane
    hop_ns: float        # each NIC-to-leaf link
    per_leaf: int        # nodes per leaf
    leaves: int          # per rail per plane
    spines: int          # per plane

    def members(self, leaf):
        """The nodes on leaf ``leaf`` of a rail."""
        return range(leaf * self.per_leaf, min(self.nodes, (leaf + 1) * self.per_leaf))

    def uplink_gib(self, leaf, spec):
        """One uplink of leaf ``leaf`` to one spine: the leaf's ports over the oversubscription, over the spines."""
        return len(self.members(leaf)) * self.port_gib / spec.oversubscription / self.spines


def layout(config, spec: FabricSpec) -> Layout:
    """The fabric ``spec`` over the nodes of ``config`` (a parsed analytical NetworkConfig: ``[Switch, Switch]``,
    scale-up then scale-out, or ``[Switch]``, one GPU per node)."""
    topology = list(config.topology)
    if len(topology) not in (1, 2) or any(t != SWITCH_TOPOLOGY for t in topology):
        raise ConfigError(f"{config.path}: --fabric needs a network of Switch dimensions [scale-up, scale-out] or "
                          f"[scale-out] (what --platform writes), got topology {topology}")
    nodes = config.npus_count[-1]
    nic_gib = (spec.nic_gbit_per_s * 1e9 / 8 / GIB if spec.nic_gbit_per_s is not None
               else config.bandwidth_gib_per_s[-1])
    per_leaf = min(spec.nodes_per_leaf or DEFAULT_NODES_PER_LEAF, nodes)
    return Layout(gpus=config.npus_count[0] if len(topology) == 2 else 1, nodes=nodes,
                  scaleup_gib=config.bandwidth_gib_per_s[0], scaleup_ns=config.latency_ns[0], nic_gib=nic_gib,
                  port_gib=nic_gib / spec.planes, hop_ns=config.latency_ns[-1], per_leaf=per_leaf,
                  leaves=math.ceil(nodes / per_leaf),
                  spines=spec.spines or max(1, math.ceil(per_leaf / spec.oversubscription)))


def build_fabric(config, spec: FabricSpec) -> Fabric:
    """The fabric ``spec`` over the nodes of ``config`` (see :func:`layout`) as a NetworkGraph. Rank ``r`` is GPU
    ``r % G`` of node ``r // G`` (dimension 0 the least significant, as the analytical backend numbers them)."""
    lay = layout(config, spec)
    gpus, nodes, per_leaf, spines = lay.gpus, lay.nodes, lay.per_leaf, lay.spines
    graph = NetworkGraph(source=f"--fabric {describe_spec(spec)} over {config.path}")
    ranks = [npu_name(r) for r in range(nodes * gpus)]
    for name in ranks:
        graph.add_node(name, NPU)
    index = {}  # (a, b) -> link index of a -> b

    def connect(a, b, gib_per_s, latency_ns):
        index[(a, b)], index[(b, a)] = len(graph.links), len(graph.links) + 1
        graph.add_link(a, b, gib_per_s, latency_ns)

    if gpus > 1:
        for node in range(nodes):
            switch = f"node{node}.scaleup"
            graph.add_node(switch, SWITCH)
            for gpu in range(gpus):
                connect(ranks[node * gpus + gpu], switch, lay.scaleup_gib, lay.scaleup_ns)
    for plane in range(spec.planes):
        spine_names = [f"plane{plane}.spine{s}" for s in range(spines)]
        for name in spine_names:
            graph.add_node(name, SWITCH)
        for rail in range(gpus):
            for leaf in range(lay.leaves):
                name = leaf_name(plane, rail, leaf)
                graph.add_node(name, SWITCH)
                for node in lay.members(leaf):
                    connect(ranks[node * gpus + rail], name, lay.port_gib, lay.hop_ns)
                for spine in spine_names:
                    connect(name, spine, lay.uplink_gib(leaf, spec), 0.0)
    graph.set_ranks(ranks)
    graph.npus_per_dim = list(config.npus_count)

    def route_fn(src, dst):
        """Scale-up inside a node; else this rail's leaf, and past it a spine, on a plane chosen by hash."""
        from astra_network_congestion.flow import ecmp_index

        a, b = ranks[src], ranks[dst]
        node_a, node_b = divmod(src, gpus), divmod(dst, gpus)
        if node_a[0] == node_b[0]:
            switch = f"node{node_a[0]}.scaleup"
            return [index[(a, switch)], index[(switch, b)]]
        choice = ecmp_index(src, dst, 0, spec.planes * spines)
        plane, spine = divmod(choice, spines)
        up = leaf_name(plane, node_a[1], node_a[0] // per_leaf)
        down = leaf_name(plane, node_b[1], node_b[0] // per_leaf)
        if up == down:
            return [index[(a, up)], index[(up, b)]]
        top = f"plane{plane}.spine{spine}"
        return [index[(a, up)], index[(up, top)], index[(top, down)], index[(down, b)]]

    description = {
        "kind": spec.kind, "spec": describe_spec(spec), "planes": spec.planes, "nodes": nodes,
        "gpus_per_node": gpus, "nodes_per_leaf": per_leaf, "leaves_per_rail_per_plane": lay.leaves,
        "spines_per_plane": spines, "oversubscription": spec.oversubscription,
        "nic_gbit_per_s": round(lay.nic_gib * GIB * 8 / 1e9, 3),
        "port_gbit_per_s": round(lay.port_gib * GIB * 8 / 1e9, 3),
        "routing": "scale-up inside a node; the rail's leaf when both ends are on it; else leaf -> spine -> leaf "
                   "(flow: ECMP over planes and spines, sprayed for planes; congestion: one path per pair by a "
                   "fixed hash)",
    }
    return Fabric(graph, route_fn, description)


def leaf_name(plane, rail, leaf):
    return f"plane{plane}.rail{rail}.leaf{leaf}"


def _number(value) -> str:
    """Short when that reads back exactly (2, 1.5), else every digit."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def describe_spec(spec: FabricSpec) -> str:
    """The spec as ``--fabric`` reads it back."""
    parts = [spec.kind]
    if spec.nodes_per_leaf is not None:
        parts.append(f"nodes_per_leaf={spec.nodes_per_leaf}")
    parts.append(f"over={_number(spec.oversubscription)}")
    if spec.nic_gbit_per_s is not None:
        parts.append(f"nic_gbps={_number(spec.nic_gbit_per_s)}")
    if spec.kind == "planes":
        parts.append(f"planes={spec.planes}")
    if spec.spines is not None:
        parts.append(f"spines={spec.spines}")
    return ":".join(parts)


def _gb_per_s(gib_per_s):
    """An InfraGraph bandwidth (decimal GB/s) from the analytical unit (GiB/s)."""
    return {"choice": "gigabytes_per_second", "gigabytes_per_second": round(gib_per_s * GIB / 1e9, 6)}


def _ns(value):
    return {"choice": "ns", "ns": float(value)}


def fabric_infragraph(config, spec: FabricSpec) -> dict:
    """The fabric as an InfraGraph wrapper document (an inline ``Infrastructure`` plus ``logical_dims``) that the
    flow and congestion backends load into the same nodes, links and routes as :func:`build_fabric` (names aside:
    ``host.<n>.xpu.<i>``, ``leaf.<k>.asic.0`` with ``k = (plane * G + rail) * leaves + leaf``,
    ``spine.<plane * spines + s>.asic.0``)."""
    lay = layout(config, spec)
    host = {"name": "host", "description": f"{lay.gpus} GPUs" + (" on a scale-up switch" if lay.gpus > 1 else ""),
            "components": [{"name": "xpu", "choice": "xpu", "count": lay.gpus}], "links": [], "edges": []}
    if lay.gpus > 1:
        host["components"].append({"name": "sw", "choice": "switch", "count": 1, "description": "scale-up switch"})
        host["links"] = [{"name": "scaleup", "physical": {"bandwidth": _gb_per_s(lay.scaleup_gib),
                                                          "latency": _ns(lay.scaleup_ns)}}]
        host["edges"] = [{"ep1": {"component": "xpu"}, "ep2": {"component": "sw"}, "scheme": "many2many",
                          "link": "scaleup"}]
    switch = {"name": "switch", "description": "a leaf or spine switch", "components": [
        {"name": "asic", "choice": "switch", "count": 1}], "links": [], "edges": []}
    links = [{"name": "nic_port", "physical": {"bandwidth": _gb_per_s(lay.port_gib), "latency": _ns(lay.hop_ns)}}]
    sizes = sorted({len(lay.members(leaf)) for leaf in range(lay.leaves)})
    for size in sizes:  # a last leaf with fewer nodes has thinner uplinks
        links.append({"name": f"uplink_{size}", "physical": {
            "bandwidth": _gb_per_s(size * lay.port_gib / spec.oversubscription / lay.spines), "latency": _ns(0)}})
    edges = []
    for plane in range(spec.planes):
        spines = f"spine[{plane * lay.spines}:{(plane + 1) * lay.spines}]"
        for rail in range(lay.gpus):
            for leaf in range(lay.leaves):
                index = (plane * lay.gpus + rail) * lay.leaves + leaf
                members = lay.members(leaf)
                for node in members:
                    edges.append({"ep1": {"instance": f"host[{node}]", "component": f"xpu[{rail}]"},
                                  "ep2": {"instance": f"leaf[{index}]", "component": "asic[0]"},
                                  "scheme": "one2one", "link": "nic_port"})
                edges.append({"ep1": {"instance": f"leaf[{index}]", "component": "asic[0]"},
                              "ep2": {"instance": spines, "component": "asic[0]"}, "scheme": "many2many",
                              "link": f"uplink_{len(members)}"})
    infrastructure = {
        "name": f"fabric-{spec.kind}",
        "description": f"--fabric {describe_spec(spec)}: {lay.nodes} nodes x {lay.gpus} GPUs (astra fabric)",
        "devices": [host, switch],
        "links": links,
        "instances": [{"name": "host", "device": "host", "count": lay.nodes},
                      {"name": "leaf", "device": "switch", "count": spec.planes * lay.gpus * lay.leaves},
                      {"name": "spine", "device": "switch", "count": spec.planes * lay.spines}],
        "edges": edges,
    }
    return {"infrastructure": infrastructure, "logical_dims": list(config.npus_count)}
