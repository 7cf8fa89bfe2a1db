"""InfraGraph infrastructures as :class:`~astra_network_congestion.graph.NetworkGraph` networks.

The ``flow`` and ``congestion`` backends call :func:`load_network_graph` when
``--network-configuration`` is not an analytical YAML (:func:`is_infragraph_config` tells them apart).
The ``astra infragraph`` command (:mod:`.infragraph_command`) prints a summary of such a network or the
equivalent analytical YAML.

Inputs
------
1. An InfraGraph ``Infrastructure`` (YAML or JSON, the current schema: ``devices`` / ``links`` /
   ``instances`` / ``edges``; PyPI ``infragraph`` 3.x). The package expands it (``set_graph``) into
   one node per component (``<instance>.<i>.<component>.<j>``) and one undirected edge per cable.
   Rank annotations come from a sibling file ``<stem>.rank-annotation.yaml`` (and, if present,
   ``<stem>.annotations.yaml``), applied with the package's ``annotate_graph``.
2. A wrapper YAML of ours (paths relative to the wrapper)::

       infrastructure: clos.yaml            # or an inline Infrastructure mapping
       annotations: clos.rank-annotation.yaml   # optional; a path or a list; replaces the sibling lookup
       logical_dims: [8, 16]                # optional; see "Logical dimensions"
       default_link_latency_ns: 500         # optional; for links without physical latency
       switch_latency_ns: 100               # optional; a number (every node of type "switch") or a
                                            # mapping {node|instance|device|component|type: ns};
                                            # the key "router" sets the routers' latency (below)
       npu_types: [xpu, gpu]                # optional; node types that are NPUs
       npu_routers: auto                    # optional; auto (default), true (every NPU) or false
       links:                               # optional; per link name ("pcie" or "<device>/pcie"),
         xpu_fabric: {bandwidth: 450 GB/s, latency: 150 ns}   # fills in or overrides physical values

Units
-----
InfraGraph bandwidths are ``gigabits_per_second`` (1e9 bit/s), ``gigabytes_per_second`` (1e9 B/s,
decimal) or ``gigatransfers_per_second`` (taken as 1e9 bit/s: one bit per transfer, no encoding
overhead). :class:`NetworkGraph` takes GB/s with GB = 2^30 bytes (the reference's analytical unit),
so 400 Gb/s = 5e10 B/s = 46.566 "GB/s" and 450 GB/s = 419.095 "GB/s". Latencies are ``ms``/``us``/``ns``.
Wrapper values are strings with a unit (``400 Gb/s``, ``450 GB/s``, ``419 GiB/s``, ``1.6 Tb/s``;
``500 ns``, ``1 us``); a bare latency number means ns. Annotations may also set a link's
``bandwidth``/``latency`` attribute (same ``"<value> <unit>"`` strings) or the astra-sim-service keys
``link_bandwidth_gbps`` (Gb/s) and ``link_latency_ms``. Precedence: wrapper ``links`` > annotation
service keys > the edge's ``bandwidth``/``latency`` (physical, or as annotated) > for latency only,
``default_link_latency_ns``. A link left without bandwidth or latency is an error naming the file,
the link and its device.

NPUs and switches
-----------------
A node is an NPU when its type (component ``choice``, or ``custom.type``) is one of ``npu_types``
(default ``xpu``, ``gpu``, ``npu``, ``tpu``, case-insensitive) or when it carries a ``rank``
attribute. Every other node (switches, NICs, ports, PCIe switches and slots, CPUs, a DGX's internal
NVSwitches, a generic switch's ``asic`` which the blueprints declare as ``cpu``) is a *switch*: it
forwards traffic. Every cable becomes two directed links. The backends never route through an
NPU node, so an NPU cabled directly to another NPU (a torus, an NVLink mesh) gets a *router*: a
switch node ``<npu>.router`` that takes over all of the NPU's cables, joined to the NPU by one
``npu-router`` link of 0 ns whose bandwidth is the sum of those cables' (the chip's injection
bandwidth). Traffic between non-neighbours then passes the routers of the NPUs on the way, as on a
TPU torus. ``npu_routers: true`` gives every NPU a router; ``false`` gives none (an NPU then
reaches only its direct neighbours and what lies behind switches).

Ranks
-----
From ``rank`` node attributes (annotations, or typed ``rank_assignment`` entries of the older
astra-sim-sdk form) when any node has one: they must be the integers 0..N-1, each once. Otherwise
the NPU nodes in natural order (``dgx.2.xpu.0`` < ``dgx.10.xpu.0``), which for the blueprints is
host-major: rank = host * NPUs_per_host + local index.

In-network reduction
--------------------
A switch node may declare that it reduces (``switch_reduction: true`` and optional
``switch_reduction_bandwidth`` / ``_latency`` / ``_buffer`` node attributes, set by an annotation); the
``inSwitch`` collective algorithm then runs on the logical dimensions such switches serve
(:mod:`astra_network_congestion.switch_tiers` has the names, defaults and rules).

Logical dimensions
------------------
``npus_per_dim`` (the dimensions the collective algorithms use; dimension 0 varies fastest in the
rank id) come from the wrapper's ``logical_dims``, else the system configuration's
``logical-dims`` key, else one dimension of all ranks. Their product must equal the rank count.
They do not change routing: every message still takes the graph's shortest paths. They only decide
which ranks talk to each other in each phase of a multi-dimensional collective. With host-major
ranks, ``[GPUs per node, nodes]`` makes dimension 0 the ranks of one node (NVSwitch/NVLink) and
dimension 1 the ranks with the same local index on every node (the same rail on a rail-optimised
fabric); a 4x4x4 torus numbered x-fastest maps to ``[4, 4, 4]``. A single dimension of all ranks
with ``oneRing`` / ``oneDirect`` (or ``ring`` / ``direct`` on that single dimension) always works.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError
from astra_sim.safeio import brief, load_yaml

from astra_network_congestion.graph import NPU, SWITCH, NetworkGraph
from astra_network_congestion.infragraph_validate import validate_infrastructure

DEFAULT_NPU_TYPES = ("xpu", "gpu", "npu", "tpu")
WRAPPER_KEYS = {
    "infrastructure", "annotations", "logical_dims", "default_link_latency_ns", "switch_latency_ns",
    "npu_types", "npu_routers", "links", "name", "description",
}
INFRASTRUCTURE_KEYS = {"name", "description", "devices", "links", "instances", "edges"}
GIB = float(1 << 30)

# ------------------------------------------------------------------ units

_BANDWIDTH_UNITS = {  # unit -> bytes per second
    "bps": 1 / 8, "Kbps": 1e3 / 8, "Mbps": 1e6 / 8, "Gbps": 1e9 / 8, "Tbps": 1e12 / 8,
    "b/s": 1 / 8, "Kb/s": 1e3 / 8, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8,
    "Bps": 1.0, "KBps": 1e3, "MBps": 1e6, "GBps": 1e9, "TBps": 1e12,
    "B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12,
    "KiB/s": 1024.0, "MiB/s": float(1 << 20), "GiB/s": GIB, "TiB/s": float(1 << 40),
    "KiBps": 1024.0, "MiBps": float(1 << 20), "GiBps": GIB, "TiBps": float(1 << 40),
    "GT/s": 1e9 / 8,  # one bit per transfer (raw signalling rate)
}
_PHYSICAL_BANDWIDTH = {
    "gigabits_per_second": "Gbps", "gigabytes_per_second": "GBps", "gigatransfers_per_second": "GT/s",
}
_LATENCY_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_VALUE_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/]+)\s*$")


def parse_bandwidth(value, where):
    """Bytes per second from ``"400 Gbps"``, ``"450 GB/s"``, ``{choice: gigabits_per_second, ...}``."""
    if isinstance(value, dict):
        choice = value.get("choice")
        if choice not in _PHYSICAL_BANDWIDTH or value.get(choice) is None:
            raise ConfigError(
                f"{where}: bandwidth {value!r} needs 'choice' ({', '.join(_PHYSICAL_BANDWIDTH)}) and its value"
            )
        value = f"{value[choice]} {_PHYSICAL_BANDWIDTH[choice]}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ConfigError(f"{where}: bandwidth {value!r} needs a unit, e.g. '400 Gb/s' or '450 GB/s'")
    match = _VALUE_UNIT.match(str(value))
    if not match or match.group(2) not in _BANDWIDTH_UNITS:
        raise ConfigError(
            f"{where}: cannot read bandwidth {value!r}; write '<number> <unit>' with unit one of "
            "Gbps, Gb/s, GBps, GB/s (1e9 bytes), GiB/s (2^30 bytes), Tb/s, GT/s"
        )
    result = float(match.group(1)) * _BANDWIDTH_UNITS[match.group(2)]
    if not math.isfinite(result) or result <= 0:
        raise ConfigError(f"{where}: bandwidth {value!r} must be > 0")
    return result


def parse_latency(value, where):
    """Nanoseconds from ``"500 ns"``, ``"1 us"``, ``{choice: ns, ns: 500}`` or a bare number (ns)."""
    if isinstance(value, dict):
        choice = value.get("choice")
        if choice not in ("ns", "us", "ms") or value.get(choice) is None:
            raise ConfigError(f"{where}: latency {value!r} needs 'choice' (ns, us, ms) and its value")
        value = f"{value[choice]} {choice}"
    if isinstance(value, bool):
        raise ConfigError(f"{where}: latency {value!r} is not a number")
    if isinstance(value, (int, float)):
        result = float(value)
    else:
        match = _VALUE_UNIT.match(str(value))
        if not match or match.group(2) not in _LATENCY_UNITS:
            try:
                result = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{where}: cannot read latency {value!r}; write '<number> ns|us|ms'") from None
        else:
            result = float(match.group(1)) * _LATENCY_UNITS[match.group(2)]
    if not math.isfinite(result) or result < 0:
        raise ConfigError(f"{where}: latency {value!r} must be >= 0")
    return result


def gib_per_s(bytes_per_s):
    """Bytes/s as the GB/s (2^30) of NetworkGraph and the analytical YAML."""
    return bytes_per_s / GIB


# ------------------------------------------------------------------ small helpers


def natural_key(name):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in str(name).split(".")]


def _one_line(exc, limit=300):
    """The infragraph package's message on one short line (its messages span lines and quote whole values)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _read_mapping(path, what):
    data = load_yaml(path, what)  # YAML is a superset of JSON
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping ({what}), got {type(data).__name__}")
    return data


def _read_named(wrapper, key, path, what):
    """A file a wrapper's ``key`` names; its errors name the wrapper and the key too."""
    try:
        return _read_mapping(path, what)
    except ConfigError as exc:
        raise ConfigError(f"{wrapper}: key {key!r}: {_one_line(exc)}") from None


def _kind_of(data):
    # (congestion.INFRAGRAPH_KEYS lists these keys: a network file whose text names none is not parsed here)
    if not isinstance(data, dict):
        return None
    if "infrastructure" in data:
        return "wrapper"
    if "devices" in data or "instances" in data:
        return "infrastructure"
    return None


def is_infragraph_config(path):
    """True when ``path`` is an InfraGraph infrastructure or our wrapper (not an analytical YAML)."""
    try:
        data = load_yaml(path)
    except ConfigError:
        return False  # whichever backend reads it says what is wrong
    return _kind_of(data) is not None


def parse_logical_dims(value, where):
    """``[8, 16]``, ``"8,16"`` or ``"8x16"`` -> [8, 16]."""
    if isinstance(value, str):
        parts = [p for p in re.split(r"[,x×\s]+", value.strip()) if p]
        try:
            value = [int(p) for p in parts]
        except ValueError:
            raise ConfigError(f"{where}: logical dims {value!r} must be integers, e.g. [8, 16]") from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    integers = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if not integers or not value:
        raise ConfigError(f"{where}: logical dims must be a non-empty list of integers, e.g. [8, 16]; got {value!r}")
    if any(v < 1 for v in value) or (len(value) > 1 and any(v < 2 for v in value)):
        raise ConfigError(f"{where}: logical dims {value} must each be >= 2 (a single dimension may be 1)")
    return list(value)


# ------------------------------------------------------------------ the loaded model


@dataclass
class InfraGraphModel:
    """An expanded infrastructure with its settings; ``network`` is set once it is complete."""

    path: str  # the file given (wrapper or infrastructure)
    infrastructure_path: str  # where the infrastructure came from (the wrapper for inline ones)
    graph: object = None  # networkx.Graph from InfraGraphService
    annotation_paths: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # the wrapper's keys (empty for a bare infrastructure)
    npu_types: tuple = DEFAULT_NPU_TYPES
    npu_nodes: list = field(default_factory=list)  # NPU node names, natural order
    rank_node: list = field(default_factory=list)
    rank_source: str = ""
    logical_dims: list = field(default_factory=list)
    dims_source: str = ""
    link_groups: list = field(default_factory=list)  # per (device, link name): see _resolve_links
    routers: list = field(default_factory=list)  # router nodes added for NPUs linked to NPUs
    problems: list = field(default_factory=list)  # why ``network`` could not be built
    warnings: list = field(default_factory=list)
    declared_links: set = field(default_factory=set)  # link names the infrastructure defines
    network: NetworkGraph = None


def load_network_graph(path, context=None):
    """The :class:`NetworkGraph` of an InfraGraph infrastructure or wrapper YAML (see the module
    docstring). ``context`` (a :class:`astra_sim.api.RunContext`) supplies the system config's
    ``logical-dims`` and ``warn``. Raises :class:`ConfigError` naming the file and what is wrong."""
    model = load_infragraph(path, context)
    return model.network


def load_infragraph(path, context=None, logical_dims=None, strict=True):
    """Expand and convert ``path``. ``logical_dims`` overrides the wrapper and system config.
    With ``strict=False`` missing link properties and dimension mismatches are recorded in
    ``model.problems`` (``model.network`` stays None) instead of raised."""
    path = str(path)
    data = _read_mapping(path, "network configuration")
    kind = _kind_of(data)
    if kind is None:
        if "topology" in data:
            raise ConfigError(f"{path}: this is an analytical network YAML (topology/npus_count/...), not InfraGraph")
        raise ConfigError(
            f"{path}: neither an InfraGraph infrastructure (keys devices, instances, links, edges) nor a "
            "wrapper YAML (key 'infrastructure')"
        )
    base = os.path.dirname(path)
    settings = {}
    if kind == "wrapper":
        settings = data
        unknown = sorted(set(data) - WRAPPER_KEYS, key=str)  # (YAML keys may be numbers)
        if unknown:
            raise ConfigError(
                f"{path}: unknown key(s) {', '.join(map(brief, unknown[:5]))}; a wrapper has "
                f"{', '.join(sorted(WRAPPER_KEYS))}"
            )
        infra = data["infrastructure"]
        if isinstance(infra, str):
            infra_path = os.path.normpath(os.path.join(base, infra))
            infra_data = _read_named(path, "infrastructure", infra_path, "InfraGraph infrastructure")
        elif isinstance(infra, dict):
            infra_path, infra_data = path, infra
        else:
            raise ConfigError(f"{path}: 'infrastructure' must be a file path or an inline infrastructure mapping")
        if _kind_of(infra_data) != "infrastructure":
            raise ConfigError(f"{infra_path}: not an InfraGraph infrastructure (no 'devices' / 'instances')")
    else:
        infra_path, infra_data = path, data

    model = InfraGraphModel(path=path, infrastructure_path=infra_path, settings=settings)
    npu_types = settings.get("npu_types", DEFAULT_NPU_TYPES)
    if isinstance(npu_types, str):
        npu_types = [npu_types]
    if not isinstance(npu_types, (list, tuple)) or not npu_types or not all(isinstance(t, str) for t in npu_types):
        raise ConfigError(f"{path}: 'npu_types' must be a list of node types, e.g. [xpu, gpu]")
    model.npu_types = tuple(t.lower() for t in npu_types)

    def listed(value):  # (a list that is something else is _expand's error to report)
        return value if isinstance(value, list) else []

    model.declared_links = {str(link.get("name")) for link in listed(infra_data.get("links")) if isinstance(link, dict)}
    for device in listed(infra_data.get("devices")):
        if isinstance(device, dict):
            model.declared_links |= {str(link.get("name")) for link in listed(device.get("links"))
                                     if isinstance(link, dict)}
    service = _expand(model, infra_data, infra_path)
    # Annotations: explicit (wrapper) or the sibling files of the infrastructure.
    if kind == "wrapper" and "annotations" in settings:
        entries = settings["annotations"]
        entries = [entries] if isinstance(entries, (str, dict)) else entries
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: 'annotations' must be a path, a list of paths or an inline annotation")
        for entry in entries:
            if isinstance(entry, str):
                ann_path = os.path.normpath(os.path.join(base, entry))
                _annotate(model, service, _read_named(path, "annotations", ann_path, "InfraGraph annotation"),
                          ann_path)
            elif isinstance(entry, dict):
                _annotate(model, service, entry, path)
            else:
                raise ConfigError(f"{path}: 'annotations' entries must be paths or mappings, got {brief(entry)}")
    elif infra_path != path or kind == "infrastructure":
        for ann_path in sibling_annotation_paths(infra_path):
            _annotate(model, service, _read_mapping(ann_path, "InfraGraph annotation"), ann_path)

    _find_ranks(model)
    _check_connected(model)
    _resolve_links(model)
    _choose_dims(model, context, logical_dims, strict)
    if model.problems:
        if strict:
            raise ConfigError("\n".join(model.problems))
        return model
    model.network = _build_network(model)
    if context is not None:
        warn = getattr(context, "warn", None)
        for message in model.warnings:
            if warn is not None:
                warn(message)
    return model


def sibling_annotation_paths(infra_path):
    """``<stem>.annotations.*`` then ``<stem>.rank-annotation.*`` next to the infrastructure."""
    folder, name = os.path.split(infra_path)
    stem = re.sub(r"\.(ya?ml|json)$", "", name)
    found = []
    for suffix in ("annotations", "rank-annotation"):
        for ext in ("yaml", "yml", "json"):
            candidate = os.path.join(folder, f"{stem}.{suffix}.{ext}")
            if os.path.isfile(candidate):
                found.append(candidate)
                break
    return found


# ------------------------------------------------------------------ expansion


def _expand(model, infra_data, infra_path):
    from infragraph import Infrastructure
    from infragraph.infragraph_service import InfraGraphService

    unknown = sorted(set(infra_data) - INFRASTRUCTURE_KEYS, key=str)
    if unknown:
        raise ConfigError(
            f"{infra_path}: unknown key(s) {', '.join(map(brief, unknown[:5]))} in the infrastructure "
            f"(expected {', '.join(sorted(INFRASTRUCTURE_KEYS))})"
        )
    try:
        infra = Infrastructure().deserialize(infra_data)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{infra_path}: not a valid InfraGraph infrastructure: {_one_line(exc)}") from None
    validate_infrastructure(infra, infra_path)
    service = InfraGraphService()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            service.set_graph(infra)
        except Exception as exc:  # the package raises KeyError, InfrastructureError, GraphError, ...
            raise ConfigError(
                f"{infra_path}: infragraph cannot expand the infrastructure: {type(exc).__name__}: {_one_line(exc)}"
            ) from None
    model.warnings.extend(f"{infra_path}: {w.message}" for w in caught)
    graph = service.get_networkx_graph()
    ghosts = sorted((n for n, d in graph.nodes(data=True) if "type" not in d), key=natural_key)
    if ghosts:
        raise ConfigError(
            f"{infra_path}: edges reach {len(ghosts)} node(s) that no instance/component defines, e.g. "
            f"{', '.join(ghosts[:4])} (check the instance and component indices of the edges)"
        )
    if graph.number_of_edges() == 0:
        raise ConfigError(f"{infra_path}: the infrastructure has no edges (no links between components)")
    model.graph = graph
    return service


def _stringify_values(data):
    for key in ("nodes", "edges", "links"):
        for item in data.get(key) or []:
            if isinstance(item, dict):
                for attr in item.get("attributes") or []:
                    if isinstance(attr, dict) and isinstance(attr.get("value"), (int, float)):
                        attr["value"] = str(attr["value"])
    for attr in data.get("graph") or []:
        if isinstance(attr, dict) and isinstance(attr.get("value"), (int, float)):
            attr["value"] = str(attr["value"])
    return data


def _annotate(model, service, data, ann_path):
    """Apply one annotation: the generic Annotation (nodes/edges/links/graph) through the package's
    ``annotate_graph``, or the older typed form (rank_assignment / link_specifications)."""
    model.annotation_paths.append(ann_path)
    graph = model.graph
    if any(k in data for k in ("rank_assignment", "link_specifications", "device_specifications")):
        for index, item in enumerate(data.get("rank_assignment") or []):
            if not isinstance(item, dict) or "npu_identifier" not in item or "rank_identifier" not in item:
                raise ConfigError(f"{ann_path}: rank_assignment[{index}] needs rank_identifier and npu_identifier")
            node = str(item["npu_identifier"])
            if node not in graph:
                raise ConfigError(f"{ann_path}: rank_assignment[{index}]: node {node!r} is not in the infrastructure")
            graph.nodes[node]["rank"] = str(item["rank_identifier"])
        for index, item in enumerate(data.get("link_specifications") or []):
            if not isinstance(item, dict) or "link_name" not in item:
                raise ConfigError(f"{ann_path}: link_specifications[{index}] needs link_name")
            edges = [(u, v) for u, v, d in graph.edges(data=True) if d.get("link") == item["link_name"]]
            if not edges:
                raise ConfigError(f"{ann_path}: link_specifications[{index}]: no edge uses link {item['link_name']!r}")
            for u, v in edges:
                for key in ("link_bandwidth_gbps", "link_latency_ms"):
                    if item.get(key) is not None:
                        graph[u][v][key] = str(item[key])
        return
    from infragraph import Annotation

    try:
        annotation = Annotation().deserialize(_stringify_values(data))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{ann_path}: not a valid InfraGraph annotation: {_one_line(exc)}") from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            service.annotate_graph(annotation)
        except Exception as exc:
            raise ConfigError(f"{ann_path}: cannot apply the annotation: {_one_line(exc)}") from None
    model.warnings.extend(f"{ann_path}: {w.message}" for w in caught)
    model.graph = service.get_networkx_graph()


def _find_ranks(model):
    graph = model.graph
    where = model.annotation_paths[-1] if model.annotation_paths else model.infrastructure_path
    ranked = {}
    for node, data in graph.nodes(data=True):
        if "rank" not in data:
            continue
        try:
            rank = int(str(data["rank"]).strip())
        except ValueError:
            raise ConfigError(f"{where}: node {node} has rank {brief(data['rank'])}, not an integer") from None
        if rank in ranked:
            raise ConfigError(f"{where}: rank {rank} is given to both {ranked[rank]} and {node}")
        ranked[rank] = node
    npus = [n for n, d in graph.nodes(data=True) if str(d.get("type", "")).lower() in model.npu_types or "rank" in d]
    model.npu_nodes = sorted(npus, key=natural_key)
    if ranked:
        missing = sorted(set(range(len(ranked))) - set(ranked))
        if missing or min(ranked) < 0:
            raise ConfigError(
                f"{where}: ranks must be 0..{len(ranked) - 1}, each once; "
                + (f"missing {missing[:8]}" if missing else f"got {sorted(ranked)[:8]}")
            )
        model.rank_node = [ranked[r] for r in range(len(ranked))]
        model.rank_source = f"'rank' attributes ({', '.join(model.annotation_paths) or model.infrastructure_path})"
        idle = len(model.npu_nodes) - len(ranked)
        if idle:
            model.warnings.append(f"{where}: {idle} NPU node(s) have no rank and stay idle")
        odd = [n for n in model.rank_node if str(graph.nodes[n].get("type", "")).lower() not in model.npu_types]
        if odd:
            model.warnings.append(
                f"{where}: {len(odd)} ranked node(s) are not of an NPU type ({', '.join(model.npu_types)}), "
                f"e.g. {odd[0]} ({graph.nodes[odd[0]].get('type')}); they are NPUs because they carry a rank"
            )
    else:
        if not model.npu_nodes:
            types = sorted({str(d.get("type")) for _, d in graph.nodes(data=True)})
            raise ConfigError(
                f"{model.infrastructure_path}: no ranks: no node carries a 'rank' attribute and no node is of an "
                f"NPU type ({', '.join(model.npu_types)}); node types present: {', '.join(types)}"
            )
        model.rank_node = list(model.npu_nodes)
        model.rank_source = f"the {len(model.npu_nodes)} NPU nodes in natural order (no rank annotations)"


def _check_connected(model):
    import networkx

    graph = model.graph
    first = model.rank_node[0]
    component = networkx.node_connected_component(graph, first)
    for rank, node in enumerate(model.rank_node):
        if node not in component:
            raise ConfigError(
                f"{model.infrastructure_path}: rank {rank} ({node}) is not connected to rank 0 ({first}); "
                "a link between them is missing"
            )


def _edge_device(graph, u, v):
    du, dv = graph.nodes[u], graph.nodes[v]
    if du.get("composed_device") is not None and du.get("composed_device") == dv.get("composed_device"):
        return du.get("device")
    return None


def _resolve_links(model):
    """Bandwidth (bytes/s) and latency (ns) of every edge; one record per (device, link name) in
    ``model.link_groups``; missing values become problems naming the file, link and device."""
    graph = model.graph
    settings = model.settings
    where = model.path
    overrides = settings.get("links") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{where}: 'links' must map link names to {{bandwidth: ..., latency: ...}}")
    parsed = {}
    for key, spec in overrides.items():
        if not isinstance(spec, dict) or not set(spec) <= {"bandwidth", "latency", "latency_ns"} or not spec:
            raise ConfigError(f"{where}: links.{key} must be a mapping with 'bandwidth' and/or 'latency'")
        entry = {}
        if spec.get("bandwidth") is not None:
            entry["bandwidth"] = parse_bandwidth(spec["bandwidth"], f"{where}: links.{key}")
        latency = spec.get("latency", spec.get("latency_ns"))
        if latency is not None:
            entry["latency"] = parse_latency(latency, f"{where}: links.{key}")
        parsed[str(key)] = entry
    default_latency = settings.get("default_link_latency_ns")
    if default_latency is not None:
        default_latency = parse_latency(default_latency, f"{where}: default_link_latency_ns")
    known = {d.get("link") for _, _, d in graph.edges(data=True)}
    for key in parsed:
        name = key.split("/")[-1]
        # A declared link whose edges expand to nothing (e.g. many2many over one component) is
        # harmless; a name the infrastructure does not define is a typo.
        if name not in known and name not in model.declared_links:
            raise ConfigError(f"{where}: links.{key}: the infrastructure defines no link named {name!r} "
                              f"(links used by edges: {', '.join(sorted(map(str, known)))})")

    groups = {}
    for u, v, data in graph.edges(data=True):
        link = data.get("link")
        device = _edge_device(graph, u, v)
        group = groups.get((device, link))
        if group is None:
            group = groups[(device, link)] = {
                "device": device, "link": link, "edges": 0, "example": f"{u} -- {v}",
                "bandwidth_given": None, "latency_given": None, "bandwidth_bytes_per_s": set(),
                "latency_ns": set(), "missing_bandwidth": 0, "missing_latency": 0,
            }
        group["edges"] += 1
        owner = f" of device {device!r}" if device else ""
        ewhere = f"{model.infrastructure_path}: link {link!r}{owner} ({u} -- {v})"
        spec = {}
        spec.update(parsed.get(str(link), {}))
        if device:
            spec.update(parsed.get(f"{device}/{link}", {}))
        bandwidth = spec.get("bandwidth")
        if bandwidth is None and data.get("link_bandwidth_gbps") is not None:
            bandwidth = parse_bandwidth(f"{data['link_bandwidth_gbps']} Gbps", ewhere)
            group["bandwidth_given"] = f"{data['link_bandwidth_gbps']} Gbps (link_bandwidth_gbps)"
        if bandwidth is None and data.get("bandwidth") is not None:
            bandwidth = parse_bandwidth(data["bandwidth"], ewhere)
            group["bandwidth_given"] = str(data["bandwidth"])
        elif "bandwidth" in spec:
            group["bandwidth_given"] = "wrapper links"
        latency = spec.get("latency")
        if latency is None and data.get("link_latency_ms") is not None:
            latency = parse_latency(f"{data['link_latency_ms']} ms", ewhere)
            group["latency_given"] = f"{data['link_latency_ms']} ms (link_latency_ms)"
        if latency is None and data.get("latency") is not None:
            latency = parse_latency(data["latency"], ewhere)
            group["latency_given"] = str(data["latency"])
        elif "latency" in spec:
            group["latency_given"] = "wrapper links"
        if latency is None and default_latency is not None:
            latency = default_latency
            group["latency_given"] = "default_link_latency_ns"
        data["_bandwidth_bytes_per_s"] = bandwidth
        data["_latency_ns"] = latency
        if bandwidth is None:
            group["missing_bandwidth"] += 1
        else:
            group["bandwidth_bytes_per_s"].add(bandwidth)
        if latency is None:
            group["missing_latency"] += 1
        else:
            group["latency_ns"].add(latency)
    model.link_groups = sorted(groups.values(), key=lambda g: (g["device"] or "", str(g["link"])))
    source = model.infrastructure_path
    via = f" or in {model.path}'s 'links'" if model.path != source else " or through a wrapper YAML's 'links'"
    for group in model.link_groups:
        owner = f" of device {group['device']!r}" if group["device"] else " (infrastructure level)"
        missing = [what for what in ("bandwidth", "latency") if group[f"missing_{what}"]]
        if not missing:
            continue
        count = max(group["missing_bandwidth"], group["missing_latency"])
        hint = {"bandwidth": "bandwidth: 400 Gb/s", "latency": "latency: 500 ns"}
        model.problems.append(
            f"{source}: link {group['link']!r}{owner} has no {' and no '.join(missing)} "
            f"({count} of {group['edges']} edge(s), e.g. {group['example']}); set physical."
            f"{' and physical.'.join(missing)} on the link{via} (e.g. links: {{{group['link']}: "
            f"{{{', '.join(hint[m] for m in missing)}}}}})"
            + (", or default_link_latency_ns" if "latency" in missing else "")
        )


def _choose_dims(model, context, override, strict):
    total = len(model.rank_node)
    chosen = None
    if override is not None:
        chosen = (parse_logical_dims(override, "--logical-dims"), "--logical-dims")
    wrapper = model.settings.get("logical_dims")
    if wrapper is not None:
        wrapper = (parse_logical_dims(wrapper, f"{model.path}: logical_dims"), f"{model.path} (logical_dims)")
    system = None
    raw = getattr(getattr(context, "system_config", None), "raw", None)
    if isinstance(raw, dict) and raw.get("logical-dims") is not None:
        sys_path = getattr(context.system_config, "path", "system configuration")
        system = (parse_logical_dims(raw["logical-dims"], f"{sys_path}: logical-dims"), f"{sys_path} (logical-dims)")
    if chosen is None and wrapper and system and wrapper[0] != system[0]:
        raise ConfigError(
            f"logical dimensions disagree: {wrapper[1]} says {wrapper[0]} but {system[1]} says {system[0]}; "
            "give them in one place"
        )
    chosen = chosen or wrapper or system or ([total], "default (one dimension of all ranks)")
    dims, source = chosen
    if math.prod(dims) != total:
        message = (
            f"{source}: logical dims {dims} multiply to {math.prod(dims)} but {model.path} has {total} ranks "
            f"(from {model.rank_source}); their product must equal the rank count"
        )
        if strict:
            raise ConfigError(message)
        model.problems.append(message)
    model.logical_dims, model.dims_source = list(dims), source


def _switch_latencies(model):
    value = model.settings.get("switch_latency_ns")
    if value is None:
        return {}
    graph = model.graph
    where = f"{model.path}: switch_latency_ns"
    result = {}
    if isinstance(value, dict):
        table = {str(k): parse_latency(v, f"{where}.{k}" if str(k).isprintable() else f"{where}[{str(k)!r}]")
                 for k, v in value.items()}
        if "router" in table:  # the routers added for NPUs linked to NPUs
            result[ROUTER_LINK] = table.pop("router")
        used = set()
        for node, data in graph.nodes(data=True):
            component = node.rsplit(".", 2)[-2] if node.count(".") >= 3 else node
            for key in (node, data.get("instance"), data.get("device"), component, data.get("type")):
                if key is not None and str(key) in table:
                    result[node] = table[str(key)]
                    used.add(str(key))
                    break
        unused = sorted(set(table) - used)
        if unused:
            raise ConfigError(
                f"{where}: {', '.join(map(repr, unused))} match no node (by name, instance, device, component or type)"
            )
    else:
        ns = parse_latency(value, where)
        for node, data in graph.nodes(data=True):
            if str(data.get("type", "")).lower() == "switch":
                result[node] = ns
    for node, data in graph.nodes(data=True):
        if data.get("switch_latency_ns") is not None:
            result[node] = parse_latency(data["switch_latency_ns"], f"{model.path}: node {node} switch_latency_ns")
    return result


ROUTER_SUFFIX = ".router"
ROUTER_LINK = "npu-router"


def _router_npus(model):
    """NPUs that get a router node: those linked directly to another NPU (``npu_routers: auto``)."""
    mode = model.settings.get("npu_routers", "auto")
    if mode not in ("auto", True, False):
        raise ConfigError(f"{model.path}: 'npu_routers' must be auto, true or false, got {mode!r}")
    npus = set(model.npu_nodes)
    direct = set()
    for u, v in model.graph.edges():
        if u in npus and v in npus:
            direct.update((u, v))
    if mode is False:
        return []
    if mode is True:
        return sorted(npus, key=natural_key)
    return sorted(direct, key=natural_key)


def _build_network(model):
    graph = model.graph
    network = NetworkGraph(source=model.path)
    npus = set(model.npu_nodes)
    latencies = _switch_latencies(model)
    routed = set(_router_npus(model))
    model.routers = [node + ROUTER_SUFFIX for node in sorted(routed, key=natural_key)]
    for node in graph.nodes:
        if node in npus:
            network.add_node(node, NPU)
        else:
            network.add_node(node, SWITCH, latencies.get(node, 0.0))
    router_latency = latencies.pop(ROUTER_LINK, 0.0)
    for router in model.routers:
        network.add_node(router, SWITCH, router_latency)
    injection = {node: 0.0 for node in routed}
    for u, v, data in graph.edges(data=True):
        bandwidth = data["_bandwidth_bytes_per_s"]
        # Every cable of an NPU that has a router starts at the router.
        a, b = (u + ROUTER_SUFFIX if u in routed else u), (v + ROUTER_SUFFIX if v in routed else v)
        for end in (u, v):
            if end in routed:
                injection[end] += bandwidth
        network.add_link(a, b, gib_per_s(bandwidth), data["_latency_ns"], name=str(data.get("link")))
    for node in sorted(routed, key=natural_key):
        # The NPU reaches its router at the sum of its links' bandwidth, with no latency.
        network.add_link(node, node + ROUTER_SUFFIX, gib_per_s(injection[node]), 0.0, name=ROUTER_LINK)
    network.npus_per_dim = list(model.logical_dims)
    network.set_ranks(model.rank_node)
    from astra_network_congestion.switch_tiers import read_reducers

    network.reducers = read_reducers(model)  # in-network reduction (inSwitch), see switch_tiers.py
    return network
