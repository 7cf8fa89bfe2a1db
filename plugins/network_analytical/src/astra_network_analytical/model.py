"""The congestion-unaware model: a closed-form delay per message, no state.

A message between NPUs whose coordinates differ in several dimensions is charged, as in the
reference, in the lowest differing dimension only (``cross_dimension_route: lowest_dimension``,
the default). That makes, for example, a data-parallel ring whose neighbours sit on different
nodes *and* different local GPU indices run at scale-up (NVLink) speed. With
``cross_dimension_route: dimension_order`` such a message is routed through every differing
dimension, dimension 0 first, as the congestion backend routes it: the latencies of all hops add
up and the bytes stream through once at the slowest crossed dimension's bandwidth.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, replace

from astra_sim.errors import ConfigError
from astra_sim.limits import MAX_TOTAL_NPUS, check_number
from astra_sim.safeio import brief, parse_yaml_once, read_text

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
#: ``cross_dimension_route`` values: the reference's rule, and routing through every differing dimension.
CROSS_DIMENSION_ROUTES = ("lowest_dimension", "dimension_order")
_RING, _FULLY_CONNECTED, _SWITCH = range(3)


@dataclass(frozen=True)
class NetworkConfig:
    """A multi-dimensional network; one entry per dimension, dimension 0 first."""

    path: str
    topology: tuple
    npus_count: tuple
    bandwidth_gib_per_s: tuple
    latency_ns: tuple
    cross_dimension_route: str = "lowest_dimension"
    #: per dimension, the switch's in-network reduction (read only for Switch dimensions): whether it
    #: reduces (default true), its reduction throughput in GB/s (None: the link bandwidth), latency (ns,
    #: default 0) and reduction buffer (bytes, default 0 = unlimited)
    switch_reduction: tuple = ()
    switch_reduction_bandwidth: tuple = ()
    switch_reduction_latency: tuple = ()
    switch_reduction_buffer: tuple = ()

    @property
    def total_npus(self):
        total = 1
        for n in self.npus_count:
            total *= n
        return total


#: Keys of the network YAML; the reference reads the first four.
KNOWN_KEYS = ("topology", "npus_count", "bandwidth", "latency", "cross_dimension_route")
#: Optional per-dimension keys of the switches' in-network reduction (``inSwitch``), and their defaults.
SWITCH_KEYS = {
    "switch_reduction": True,
    "switch_reduction_bandwidth": None,
    "switch_reduction_latency": 0,
    "switch_reduction_buffer": 0,
}

#: the switch keys whose range is that of a link's key (the same units)
_SWITCH_LIMITS = {"switch_reduction_latency": "latency", "switch_reduction_bandwidth": "bandwidth"}


def parse_network_config(path, warn=None):
    """Read the reference's network YAML, with errors naming the file and key; ``warn(message)``
    hears of keys nothing reads (a misspelt optional key would otherwise keep its default)."""
    # parsed once per text: a serving run reads its platform's same generated file once per new batch shape
    data = parse_yaml_once(read_text(path, "network configuration"), os.fspath(path), "network configuration")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with keys topology, npus_count, bandwidth, latency")
    lists = {}
    for key in ("topology", "npus_count", "bandwidth", "latency"):
        if key not in data:
            raise ConfigError(f"{path}: key {key!r} is missing (expected a list with one entry per dimension)")
        value = data[key]
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{path}: key {key!r} must be a non-empty list, got {brief(value)}")
        lists[key] = value
    dims = len(lists["topology"])
    for key, value in lists.items():
        if len(value) != dims:
            raise ConfigError(
                f"{path}: key {key!r} has {len(value)} entries but 'topology' has {dims}; give one per dimension"
            )
    for i, name in enumerate(lists["topology"]):
        if name not in TOPOLOGIES:
            raise ConfigError(
                f"{path}: topology[{i}] is {brief(name)}; the analytical backend knows {', '.join(TOPOLOGIES)}"
            )
    for key in ("npus_count", "bandwidth", "latency"):  # each within what hardware can have
        for i, value in enumerate(lists[key]):
            check_number(path, key, value, label=f"{key}[{i}]")
            if key == "npus_count" and not isinstance(value, int):
                raise ConfigError(f"{path}: key 'npus_count[{i}]' must be an integer, got {brief(value)}")
    for key in data:
        if key not in KNOWN_KEYS and key not in SWITCH_KEYS and warn is not None:
            close = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(KNOWN_KEYS + tuple(SWITCH_KEYS))})"
            warn(f"{path}: key {key!r} is not a network configuration key and is ignored{hint}")
    total = 1
    for count in lists["npus_count"]:
        total *= count
    if total > MAX_TOTAL_NPUS:
        raise ConfigError(f"{path}: key 'npus_count' makes {total:,} NPUs; at most {MAX_TOTAL_NPUS:,} are simulated")
    route = data.get("cross_dimension_route", CROSS_DIMENSION_ROUTES[0])
    if route not in CROSS_DIMENSION_ROUTES:
        raise ConfigError(f"{path}: cross_dimension_route must be one of {', '.join(CROSS_DIMENSION_ROUTES)}, "
                          f"got {brief(route)}")
    return NetworkConfig(
        path=str(path),
        topology=tuple(lists["topology"]),
        npus_count=tuple(lists["npus_count"]),
        bandwidth_gib_per_s=tuple(float(v) for v in lists["bandwidth"]),
        latency_ns=tuple(float(v) for v in lists["latency"]),
        cross_dimension_route=route,
        **_switch_lists(path, data, dims),
    )


def _switch_lists(path, data, dims):
    """The optional per-dimension switch reduction keys, checked, defaults filled in."""
    out = {}
    for key, default in SWITCH_KEYS.items():
        value = data.get(key)
        if value is None:
            out[key] = (default,) * dims
            continue
        if not isinstance(value, list) or len(value) != dims:
            raise ConfigError(f"{path}: key {key!r} must be a list with one entry per dimension ({dims}), got {value!r}")
        for i, item in enumerate(value):
            if key == "switch_reduction":
                if not isinstance(item, bool):
                    raise ConfigError(f"{path}: key '{key}[{i}]' must be true or false, got {item!r}")
            elif item is not None:
                if isinstance(item, bool) or not isinstance(item, (int, float)) or item < 0:
                    raise ConfigError(f"{path}: key '{key}[{i}]' must be a number >= 0, got {item!r}")
                if key == "switch_reduction_bandwidth" and item == 0:
                    raise ConfigError(f"{path}: key '{key}[{i}]' must be > 0 GB/s (or null for the link bandwidth)")
                if key in _SWITCH_LIMITS:  # the range of a link's latency or bandwidth (astra_sim.limits)
                    check_number(path, _SWITCH_LIMITS[key], item, label=f"{key}[{i}]")
        out[key] = tuple(default if item is None else item for item in value)
    return out


def in_switch_spec(config, dim):
    """The ``inSwitch`` view of dimension ``dim``'s switch (None when the dimension is not a Switch)."""
    from astra_sim.api import InSwitchSpec

    if not 0 <= dim < len(config.topology) or config.topology[dim] != "Switch":
        return None
    line = config.bandwidth_gib_per_s[dim] * (1 << 30) / 1e9
    rate = config.switch_reduction_bandwidth[dim]
    return InSwitchSpec(
        can_reduce=config.switch_reduction[dim],
        line_rate=line,
        reduce_rate=line if rate is None else rate * (1 << 30) / 1e9,
        latency_ns=int(config.switch_reduction_latency[dim]),
        buffer_bytes=int(config.switch_reduction_buffer[dim]),
        link_latency_ns=config.latency_ns[dim],
    )


_NPU = re.compile(r"npu(\d+)$")
_SWITCH_NAME = re.compile(r"d(\d+)\.g(\d+)\.switch$")


def links_per_npu(config, dim) -> int:
    """How many links each NPU has in dimension ``dim``, as the flow backend builds it: a ring's two
    neighbours (one when it has two members), every other member when fully connected, one switch."""
    kind, count = config.topology[dim], config.npus_count[dim]
    if kind == "Ring":
        return 2 if count > 2 else 1
    return count - 1 if kind == "FullyConnected" else 1


def _cable_ends(config, a, b):
    """The dimension a cable ``a``-``b`` belongs to and the NPUs it leaves (node names as the flow backend
    gives them: ``npu3``, ``d1.g0.switch``), or None when no link joins them."""
    ends = [_NPU.match(a), _NPU.match(b)]
    strides, stride = [], 1
    for count in config.npus_count:
        strides.append(stride)
        stride *= count
    total = stride
    npus = [int(m.group(1)) for m in ends if m]
    if any(n >= total for n in npus):
        return None
    coords = [[(n // s) % c for s, c in zip(strides, config.npus_count)] for n in npus]
    if len(npus) == 2:  # a direct link: a ring's neighbours or two members of a fully connected group
        differ = [d for d in range(len(strides)) if coords[0][d] != coords[1][d]]
        if len(differ) != 1:
            return None
        dim = differ[0]
        kind, count = config.topology[dim], config.npus_count[dim]
        gap = abs(coords[0][dim] - coords[1][dim])
        linked = kind == "FullyConnected" or (kind == "Ring" and min(gap, count - gap) == 1)
        return (dim, npus) if linked else None
    switch = _SWITCH_NAME.match(b if ends[0] else a)
    if len(npus) != 1 or switch is None:
        return None
    dim, group = int(switch.group(1)), int(switch.group(2))
    if dim >= len(strides) or config.topology[dim] != "Switch":
        return None
    npu, span = npus[0], strides[dim] * config.npus_count[dim]
    return (dim, npus) if (npu // span) * strides[dim] + npu % strides[dim] == group else None


def without_links(config, failed, where="option failed_links"):
    """``config`` with failed cables (``[[a, b], ...]``, the flow backend's node names) taken out.

    The analytical model is symmetric: every NPU of a dimension sends at the dimension's one bandwidth, so a
    cable cannot be removed on its own. What it can say is that a synchronous collective over the dimension
    waits for its slowest member: the dimension's bandwidth becomes the share of links left at the NPU that lost
    the most (a ring NPU with one of its two links down: half). An NPU left with no link in a dimension is a
    ConfigError: the analytical model cannot route around it (the flow backend can)."""
    lost = {}  # (dim, npu) -> cables down at it
    for pair in failed:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise ConfigError(f"{where}: each failed link is a pair of node names [a, b], got {brief(pair)}")
        a, b = (str(end).strip() for end in pair)
        found = _cable_ends(config, a, b)
        if found is None:
            raise ConfigError(f"{where}: no link joins {a!r} and {b!r} in {config.path} (links join npuN to its "
                              "Ring or FullyConnected neighbours, and npuN to its switch d<dim>.g<group>.switch)")
        dim, npus = found
        for npu in npus:
            lost[(dim, npu)] = lost.get((dim, npu), 0) + 1
    share = [1.0] * len(config.topology)
    for (dim, npu), count in sorted(lost.items()):
        links = links_per_npu(config, dim)
        if count >= links:
            raise ConfigError(f"{where}: npu{npu} has no link left in dimension {dim} ({config.topology[dim]}); "
                              "the analytical model cannot route around it (network_backend flow can)")
        share[dim] = min(share[dim], (links - count) / links)
    bandwidth = tuple(bw * s for bw, s in zip(config.bandwidth_gib_per_s, share))
    return replace(config, bandwidth_gib_per_s=bandwidth)


class AnalyticalNetwork:
    """Delay = hops x latency + bytes / bandwidth in the first differing dimension (the reference), or
    summed hop latencies + bytes / the slowest bandwidth over all differing dimensions (``dimension_order``)."""

    def __init__(self, config, engine, failed_links=None):
        self.failed_links = [list(pair) for pair in failed_links or ()]
        if self.failed_links:  # each dimension at the share of links its worst-hit NPU has left
            config = without_links(config, self.failed_links)
        self.config = config
        self.engine = engine
        self.npus_per_dim = list(config.npus_count)
        self._dims = []
        stride = 1
        for name, count, bw, lat in zip(config.topology, config.npus_count, config.bandwidth_gib_per_s, config.latency_ns):
            kind = TOPOLOGIES.index(name)
            bytes_per_ns = bw * (1 << 30) / 1_000_000_000
            self._dims.append((stride, count, kind, lat, bytes_per_ns))
            stride *= count
        self._dimension_order = config.cross_dimension_route == "dimension_order"

    @classmethod
    def from_context(cls, context):
        config = parse_network_config(context.network_config_path, getattr(context, "warn", None))
        return cls(config, context.engine, (getattr(context, "options", None) or {}).get("failed_links"))

    def delay_ns(self, src, dst, size):
        """Closed-form delivery time of ``size`` bytes from ``src`` to ``dst``.

        Stateless, so the kernel may memoise it and schedule arrivals itself.
        """
        latency_ns = 0.0
        slowest = None  # bytes/ns of the slowest dimension crossed
        for stride, count, kind, latency, bytes_per_ns in self._dims:
            a = (src // stride) % count
            b = (dst // stride) % count
            if a != b:
                if kind == _RING:
                    diff = abs(a - b)
                    hops = min(diff, count - diff)
                elif kind == _FULLY_CONNECTED:
                    hops = 1
                else:
                    hops = 2
                if not self._dimension_order:
                    return int(hops * latency + size / bytes_per_ns)
                latency_ns += hops * latency
                if slowest is None or bytes_per_ns < slowest:
                    slowest = bytes_per_ns
        if slowest is None:
            raise ConfigError(f"NPU {src} sends a message to itself; the analytical network needs two distinct NPUs")
        return int(latency_ns + size / slowest)

    def in_switch(self, dim):
        """The switch of dimension ``dim`` for the ``inSwitch`` algorithm (None: not a Switch)."""
        return in_switch_spec(self.config, dim)

    def send(self, src, dst, size, fn, arg):
        self.engine.schedule(self.delay_ns(src, dst, size), fn, arg)

    def symmetry_dims(self):
        """Per dimension, which relabellings of its coordinates keep every delay: a ring's hop count
        depends on the distance around the ring (rotations only); a switch or fully connected dimension
        charges every pair alike (any permutation). Delays depend on nothing else (no state)."""
        return ["rotation" if kind == _RING else "any" for _stride, _count, kind, _lat, _bw in self._dims]

    def describe(self):
        c = self.config
        return {
            "backend": "analytical",
            "topology": list(c.topology),
            "npus_count": list(c.npus_count),
            "bandwidth_gib_per_s": list(c.bandwidth_gib_per_s),
            "latency_ns": list(c.latency_ns),
            **({"cross_dimension_route": c.cross_dimension_route}
               if c.cross_dimension_route != CROSS_DIMENSION_ROUTES[0] else {}),
            **({"failed_links": self.failed_links} if self.failed_links else {}),
        }
