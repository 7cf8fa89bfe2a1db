"""Readers of ASTRA-sim's ns-3 inputs: ``network_cfg.txt``, its topology file, ``logical_topology.json``.

Pure Python (no ns-3 import), so errors in the inputs appear at once. Every error is a one-line
:class:`~astra_sim.errors.ConfigError` naming the file, the line and what was expected.

``network_cfg.txt``
    One ``KEY value...`` per line (blank lines ignored). The keys this backend models are
    :data:`MODELLED_KEYS`; any other key is reported in one warning that names it. The ``*_MAP`` keys
    are ``n rate_1 value_1 ... rate_n value_n`` with rates in bit/s; K_min and K_max are in KB (1000 bytes),
    ``BUFFER_SIZE`` in MB (2^20 bytes) per switch, ``SIMULATOR_STOP_TIME`` in seconds, DCQCN's timers
    (``RP_TIMER``, ``ALPHA_RESUME_INTERVAL``, ``RATE_DECREASE_INTERVAL``) in us (the reference's units).

Topology file
    Line 1: ``nodes switches links``; line 2: the switch ids; then one ``src dst rate delay error_rate``
    line per link (``400Gbps``, ``0.0005ms``). Ranks are the non-switch nodes in id order.

Paths named in a file resolve against the current directory first (as the reference does), then
against the naming file's folder.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError
from astra_sim.safeio import brief, read_text

#: CC_MODE values this backend runs, and what they mean.
SUPPORTED_CC = {
    0: "plain TCP (NewReno; this plugin's extension)",
    1: "DCQCN (rate-based over UDP, CNPs from ECN marks; no PFC, so a drop stops the run)",
    8: "DCTCP (ns-3 TcpDctcp, RED/ECN marking)",
}
#: ASTRA-sim's other RDMA modes, which mainline ns-3 cannot run (no RDMA NIC with INT or RTT probes).
RDMA_CC = {3: "HPCC", 7: "TIMELY", 10: "HPCC-PINT", 12: "HPCC variant of ASTRA-sim's shipped configs"}

#: DCQCN's parameters (used with CC_MODE 1 only): key -> (kind, Ns3Config.dcqcn name). Times in us.
DCQCN_KEYS = {
    "RATE_AI": ("rate", "rate_ai_bps"), "RATE_HAI": ("rate", "rate_hai_bps"), "MIN_RATE": ("rate", "min_rate_bps"),
    "RP_TIMER": ("float", "rp_timer_us"), "ALPHA_RESUME_INTERVAL": ("float", "alpha_interval_us"),
    "RATE_DECREASE_INTERVAL": ("float", "decrease_interval_us"), "FAST_RECOVERY_TIMES": ("int", "fast_recovery"),
    "CLAMP_TARGET_RATE": ("bool", "clamp"),
}
#: DCQCN's defaults where the file does not say (the DCQCN paper's; EWMA_GAIN g = 1/256).
DCQCN_DEFAULTS = {"rate_ai_bps": 50_000_000, "rate_hai_bps": 100_000_000, "min_rate_bps": 100_000_000,
                  "rp_timer_us": 55.0, "alpha_interval_us": 55.0, "decrease_interval_us": 4.0, "fast_recovery": 5,
                  "clamp": False}

MODELLED_KEYS = (
    "TOPOLOGY_FILE", "PACKET_PAYLOAD_SIZE", "CC_MODE", "KMIN_MAP", "KMAX_MAP", "PMAX_MAP", "BUFFER_SIZE",
    "ENABLE_QCN", "SIMULATOR_STOP_TIME", "EWMA_GAIN", "ERROR_RATE_PER_LINK", "LINK_DOWN", *DCQCN_KEYS,
)
#: ``LINK_DOWN T A B`` takes the link A-B down at this many ns plus T us (T = 0: never), as ASTRA-sim's ns-3 does.
#: source: astra-sim/astra-network-ns3, scratch/common.h (commit 23b42ac): ReadConf reads ``link_down_time
#: link_down_A link_down_B``; SetupNetwork books ``TakeDownLink`` at ``Seconds(2) + MicroSeconds(link_down_time)``
#: when ``link_down_time > 0``.
LINK_DOWN_BASE_NS = 2_000_000_000

_RATE_UNITS = {"": None, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([kKmMgGtT]?)(bps|b/s|Bps|B/s)$")
_TIME = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(s|ms|us|ns|ps)$")
_TIME_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0, "ps": 1e-3}


@dataclass
class Ns3Config:
    """The settings of ``network_cfg.txt`` this backend uses (units in the names)."""

    path: str
    topology_file: str = ""
    topology_line: int = 0
    payload_bytes: int = 1000
    cc_mode: int = 8
    kmin_kb: dict = field(default_factory=dict)  # link rate (bit/s) -> K_min (KB)
    kmax_kb: dict = field(default_factory=dict)
    pmax: dict = field(default_factory=dict)
    buffer_mb: float = 32.0
    enable_qcn: bool = True
    stop_time_s: float | None = None
    ewma_gain: float | None = None
    error_rate: float = 0.0
    ignored_keys: list = field(default_factory=list)
    dcqcn: dict = field(default_factory=lambda: dict(DCQCN_DEFAULTS))
    dcqcn_keys: list = field(default_factory=list)  # the DCQCN keys the file gives
    link_down: tuple | None = None  # LINK_DOWN: (node a, node b, at ns, line), when its time is > 0


@dataclass
class Link:
    src: int
    dst: int
    rate_bps: int
    delay_ns: int
    error_rate: float
    line: int


@dataclass
class Topology:
    path: str
    nodes: int
    switches: list
    links: list

    @property
    def hosts(self):
        """The non-switch nodes in id order: host ``i`` is rank ``i``."""
        switches = set(self.switches)
        return [n for n in range(self.nodes) if n not in switches]


def resolve(name, base_file):
    """``name`` as the reference finds it: relative to the current directory, else to ``base_file``'s folder."""
    if os.path.isabs(name) or os.path.exists(name):
        return name
    beside = os.path.join(os.path.dirname(os.path.abspath(base_file)), name)
    return beside if os.path.exists(beside) else name


def _number(text, where, kind=float, minimum=None):
    try:
        value = kind(text)
    except ValueError:
        expected = "an integer" if kind is int else "a number"
        raise ConfigError(f"{where}: expected {expected}, got {brief(text)}") from None
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {brief(text)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where}: expected a value >= {minimum}, got {brief(text)}")
    if abs(value) >= 1 << 63:  # no count, id or size is that big (and messages would repeat all its digits)
        raise ConfigError(f"{where}: {brief(text)} is out of range (an int64)")
    return value


def parse_rate_bps(text, where):
    """``400Gbps`` / ``100Gb/s`` / ``10GBps`` -> bit/s (int); a rate without a unit is an error."""
    match = _RATE.match(text)
    if match is None:
        if re.match(r"^[0-9]*\.?[0-9]+$", text):
            raise ConfigError(f"{where}: rate {brief(text)} has no unit (expected e.g. 100Gbps)")
        raise ConfigError(f"{where}: expected a rate such as 100Gbps, got {brief(text)}")
    value = float(match.group(1)) * (_RATE_UNITS[match.group(2).lower()] or 1.0)
    if match.group(3).startswith("B"):
        value *= 8
    if not math.isfinite(value):
        raise ConfigError(f"{where}: rate {brief(text)} is not a finite number")
    bps = int(round(value))
    if bps <= 0:
        raise ConfigError(f"{where}: rate {brief(text)} must be > 0")
    return bps


def parse_delay_ns(text, where):
    """``0.0005ms`` / ``500ns`` -> integer ns (rounded); a delay without a unit is an error."""
    match = _TIME.match(text)
    if match is None:
        if re.match(r"^[0-9]*\.?[0-9]+$", text):
            raise ConfigError(f"{where}: delay {brief(text)} has no unit (expected e.g. 0.0005ms or 500ns)")
        raise ConfigError(f"{where}: expected a delay such as 500ns, got {brief(text)}")
    delay = float(match.group(1)) * _TIME_NS[match.group(2)]
    if not math.isfinite(delay):
        raise ConfigError(f"{where}: delay {brief(text)} is not a finite number")
    return int(round(delay))


def _parse_map(values, where, kind):
    if not values:
        raise ConfigError(f"{where}: expected a count and that many 'rate value' pairs")
    count = _number(values[0], where, int, 0)
    if len(values) != 1 + 2 * count:
        raise ConfigError(f"{where}: count {count} needs {2 * count} numbers after it, got {len(values) - 1}")
    out = {}
    for i in range(count):
        rate = _number(values[1 + 2 * i], where, int, 1)
        out[rate] = _number(values[2 + 2 * i], where, kind, 0)
    return out


def read_network_cfg(path):
    """Read ``network_cfg.txt`` into :class:`Ns3Config` (CC mode checked by :func:`check_cc_mode`)."""
    lines = read_text(path, "network configuration").splitlines()
    config = Ns3Config(path=path)
    seen = set()
    for number, raw in enumerate(lines, 1):
        parts = raw.split()
        if not parts or parts[0].startswith("#"):
            continue
        key, values = parts[0], parts[1:]
        where = f"{path}:{number}: {key}"
        if key in seen and key in MODELLED_KEYS:
            raise ConfigError(f"{where}: key given twice")
        seen.add(key)
        if key not in MODELLED_KEYS:
            config.ignored_keys.append(key)
            continue
        if key.endswith("_MAP"):
            parsed = _parse_map(values, where, float if key == "PMAX_MAP" else int)
            if key == "PMAX_MAP" and any(p > 1 for p in parsed.values()):
                raise ConfigError(f"{where}: P_max is a probability, expected values in [0, 1]")
            setattr(config, {"KMIN_MAP": "kmin_kb", "KMAX_MAP": "kmax_kb", "PMAX_MAP": "pmax"}[key], parsed)
            continue
        if key == "LINK_DOWN":
            if len(values) != 3:
                raise ConfigError(f"{where}: expected 'LINK_DOWN time_us node_a node_b', got {len(values)} values")
            at_us, a, b = (_number(value, where, int, 0) for value in values)
            if LINK_DOWN_BASE_NS + at_us * 1000 >= 1 << 62:
                raise ConfigError(f"{where}: time {at_us} us is past what ns-3 counts (int64 ns)")
            if at_us:  # 0: no link goes down (the reference's default line LINK_DOWN 0 0 0)
                config.link_down = (a, b, LINK_DOWN_BASE_NS + at_us * 1000, number)
            continue
        if len(values) != 1:
            raise ConfigError(f"{where}: expected one value, got {len(values)}")
        value = values[0]
        if key in DCQCN_KEYS:
            kind, name = DCQCN_KEYS[key]
            if kind == "rate":
                parsed = parse_rate_bps(value, where)
            elif kind == "bool":
                if value not in ("0", "1"):
                    raise ConfigError(f"{where}: expected 0 or 1, got {value!r}")
                parsed = value == "1"
            elif kind == "int":
                parsed = _number(value, where, int, 0)
            else:
                parsed = _number(value, where, float, 0)
                if parsed <= 0:
                    raise ConfigError(f"{where}: expected a time > 0 us, got {value}")
            config.dcqcn[name] = parsed
            config.dcqcn_keys.append(key)
        elif key == "TOPOLOGY_FILE":
            config.topology_file = value
            config.topology_line = number
        elif key == "PACKET_PAYLOAD_SIZE":
            config.payload_bytes = _number(value, where, int, 1)
            if config.payload_bytes > 65000:
                raise ConfigError(f"{where}: expected at most 65000 bytes, got {value}")
        elif key == "CC_MODE":
            config.cc_mode = _number(value, where, int, 0)
        elif key == "BUFFER_SIZE":
            config.buffer_mb = _number(value, where, float, 0)
            if config.buffer_mb <= 0:
                raise ConfigError(f"{where}: expected a buffer size > 0 MB, got {value}")
        elif key == "ENABLE_QCN":
            if value not in ("0", "1"):
                raise ConfigError(f"{where}: expected 0 or 1, got {value!r}")
            config.enable_qcn = value == "1"
        elif key == "SIMULATOR_STOP_TIME":
            config.stop_time_s = _number(value, where, float, 0)
        elif key == "EWMA_GAIN":
            config.ewma_gain = _number(value, where, float, 0)
            if config.ewma_gain > 1:
                raise ConfigError(f"{where}: expected a gain in [0, 1], got {value}")
        elif key == "ERROR_RATE_PER_LINK":
            config.error_rate = _number(value, where, float, 0)
    if not config.topology_file:
        raise ConfigError(f"{path}: no TOPOLOGY_FILE key (the topology file's path)")
    for rate, kmin in config.kmin_kb.items():
        kmax = config.kmax_kb.get(rate)
        if kmax is not None and kmax < kmin:
            raise ConfigError(f"{path}: K_max {kmax} KB is below K_min {kmin} KB for links of {rate} bit/s")
    return config


def check_cc_mode(config):
    """A one-line error for a CC_MODE this backend does not run, naming the modes it does."""
    mode = config.cc_mode
    if mode in SUPPORTED_CC:
        return
    supported = "; ".join(f"{m} = {name}" for m, name in SUPPORTED_CC.items())
    what = RDMA_CC.get(mode)
    reason = (f"CC_MODE {mode} ({what}) is an RDMA rate-based scheme, which mainline ns-3 has no NIC for"
              if what else f"CC_MODE {mode} is not a known congestion-control mode")
    raise ConfigError(f"{config.path}: {reason}; supported modes: {supported}")


def read_config_topology(config):
    """The topology file ``config`` names (resolved as the reference does), read."""
    path = resolve(config.topology_file, config.path)
    if not os.path.isfile(path):
        state = "is not a file" if os.path.exists(path) else "does not exist"
        raise ConfigError(
            f"{config.path}:{config.topology_line}: TOPOLOGY_FILE {config.topology_file!r} {state} "
            f"(looked in the current directory and in {os.path.dirname(os.path.abspath(config.path))})"
        )
    return read_topology(path)


def read_topology(path):
    """Read the topology file (see the module docstring)."""
    lines = read_text(path, "topology").splitlines()
    rows = [(n, line.split()) for n, line in enumerate(lines, 1) if line.split()]
    if not rows:
        raise ConfigError(f"{path}: empty topology file (expected 'nodes switches links' on line 1)")
    number, head = rows[0]
    if len(head) != 3:
        raise ConfigError(f"{path}:{number}: expected 'nodes switches links' (3 integers), got {len(head)} fields")
    nodes = _number(head[0], f"{path}:{number}: nodes", int, 1)
    switch_count = _number(head[1], f"{path}:{number}: switches", int, 0)
    link_count = _number(head[2], f"{path}:{number}: links", int, 0)
    if switch_count >= nodes:
        raise ConfigError(f"{path}:{number}: {switch_count} switches leave no NPU among {nodes} nodes")
    switches = []
    body = rows[1:]
    if switch_count:
        if not body:
            raise ConfigError(f"{path}: expected the {switch_count} switch ids on line 2")
        number, ids = body[0]
        body = body[1:]
        if len(ids) != switch_count:
            raise ConfigError(f"{path}:{number}: expected {switch_count} switch ids, got {len(ids)}")
        for text in ids:
            sid = _number(text, f"{path}:{number}: switch id", int, 0)
            if sid >= nodes:
                raise ConfigError(f"{path}:{number}: switch {sid} is not a node (nodes are 0..{nodes - 1})")
            if sid in switches:
                raise ConfigError(f"{path}:{number}: switch {sid} listed twice")
            switches.append(sid)
    if len(body) != link_count:
        raise ConfigError(f"{path}: line 1 announces {link_count} links but {len(body)} link lines follow")
    links = []
    pairs = set()
    for number, fields in body:
        where = f"{path}:{number}"
        if len(fields) != 5:
            raise ConfigError(f"{where}: expected 'src dst rate delay error_rate', got {len(fields)} fields")
        src = _number(fields[0], f"{where}: src", int, 0)
        dst = _number(fields[1], f"{where}: dst", int, 0)
        for end in (src, dst):
            if end >= nodes:
                raise ConfigError(f"{where}: link to unknown node {end} (nodes are 0..{nodes - 1})")
        if src == dst:
            raise ConfigError(f"{where}: link from node {src} to itself")
        if (min(src, dst), max(src, dst)) in pairs:
            raise ConfigError(f"{where}: a second link between nodes {src} and {dst}")
        pairs.add((min(src, dst), max(src, dst)))
        rate = parse_rate_bps(fields[2], f"{where}: rate")
        delay = parse_delay_ns(fields[3], f"{where}: delay")
        error = _number(fields[4], f"{where}: error_rate", float, 0)
        if error > 1:
            raise ConfigError(f"{where}: error_rate is a probability, expected [0, 1], got {fields[4]}")
        links.append(Link(src, dst, rate, delay, error, number))
    topology = Topology(path, nodes, switches, links)
    if nodes - len(switches) > 2 * len(links):  # (before listing the hosts: line 1 may announce 10^18 nodes)
        raise ConfigError(f"{path}: {nodes - len(switches):,} NPU nodes but {len(links):,} links: some NPU has no link")
    linked = {l.src for l in links} | {l.dst for l in links}
    for host in topology.hosts:
        if host not in linked:
            raise ConfigError(f"{path}: NPU node {host} has no link")
    return topology


def without_links(topology, failed, where="option failed_links"):
    """``topology`` without the failed cables: ``failed`` is a list of node-id pairs ``[a, b]`` (the topology
    file's ids), each removing the link between ``a`` and ``b``. The routes ns-3 is given are then computed over
    what is left (the glue's shortest paths through switches), so traffic goes around them. A pair that is no
    link of the file is a ConfigError naming ``where`` and the file."""
    down = {_link_index(topology, pair, where) for pair in failed or ()}
    if not down:
        return topology
    return Topology(topology.path, topology.nodes, list(topology.switches),
                    [link for i, link in enumerate(topology.links) if i not in down])


def link_failures(topology, value, where="option link_failures"):
    """``[(link index, at_ns)]`` from the run option ``link_failures``: a list of ``{link: [a, b], at_ns: T}``
    (node ids of the topology file; T: ns from the run's start), each a cable that goes down at ``T`` in the
    middle of the run. Anything else is a ConfigError naming ``where`` and the entry."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of {{link: [a, b], at_ns: T}}, got {brief(value)}")
    out = []
    for i, entry in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"link", "at_ns"}:
            raise ConfigError(f"{here}: expected {{link: [a, b], at_ns: T}} (T: ns from the run's start), got "
                              f"{brief(entry)}")
        at = entry["at_ns"]
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at < 1 << 62:
            raise ConfigError(f"{here}.at_ns: expected an integer >= 0 (ns), got {brief(at)}")
        out.append((_link_index(topology, entry["link"], f"{here}.link"), at))
    return out


def config_link_failures(config, topology):
    """``[(link index, at_ns)]`` of the file's ``LINK_DOWN`` (empty without one); a link the topology lacks is a
    ConfigError naming the file and line."""
    if config.link_down is None:
        return []
    a, b, at_ns, line = config.link_down
    return [(_link_index(topology, (a, b), f"{config.path}:{line}: LINK_DOWN"), at_ns)]


def _link_index(topology, pair, where):
    """The index in ``topology.links`` of the cable between the node ids of ``pair``."""
    if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
        raise ConfigError(f"{where}: each failed link is a pair of node ids [a, b], got {brief(pair)}")
    try:
        if any(isinstance(end, (bool, float)) for end in pair):
            raise ValueError
        a, b = (int(end) for end in pair)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: a failed link's ends are node ids (integers), got {brief(pair)}") from None
    for i, link in enumerate(topology.links):
        if {link.src, link.dst} == {a, b}:
            return i
    raise ConfigError(f"{where}: no link joins nodes {a} and {b} in {topology.path} (its links are its "
                      "lines 'src dst rate delay error_rate', from line 3)")


def read_logical_topology(path, npus):
    """``{"logical-dims": ["8"]}`` -> [8]; the product must be the NPU count."""
    lines = read_text(path, "logical topology").splitlines()
    text = "\n".join(lines)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # a number of over 4,300 digits; nesting deeper than the stack
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    line = next((n for n, l in enumerate(lines, 1) if "logical-dims" in l), 1)
    if not isinstance(raw, dict) or "logical-dims" not in raw:
        raise ConfigError(f"{path}:1: expected an object with a 'logical-dims' list")
    dims_raw = raw["logical-dims"]
    if not isinstance(dims_raw, list) or not dims_raw:
        raise ConfigError(f"{path}:{line}: logical-dims must be a non-empty list, got {brief(dims_raw)}")
    dims = []
    for value in dims_raw:
        if isinstance(value, bool):
            value = None
        elif isinstance(value, str):  # the reference writes them as strings ("8")
            try:
                value = int(value.strip())
            except ValueError:
                value = None
        if not isinstance(value, int) or not 1 <= value <= npus:
            raise ConfigError(f"{path}:{line}: logical-dims entries must be positive integers (at most the {npus} "
                              f"NPUs), got {brief(dims_raw)}")
        dims.append(value)
    if math.prod(dims) != npus:
        raise ConfigError(
            f"{path}:{line}: logical-dims {brief(dims)} multiply to {brief(math.prod(dims))} but the topology has "
            f"{npus} NPUs"
        )
    return dims


def ecn_thresholds(config, rate_bps, where):
    """(K_min bytes, K_max bytes, P_max) for a switch port of ``rate_bps`` (the reference needs an exact entry)."""
    missing = [key for key, table in (("KMIN_MAP", config.kmin_kb), ("KMAX_MAP", config.kmax_kb),
                                      ("PMAX_MAP", config.pmax)) if rate_bps not in table]
    if missing:
        raise ConfigError(
            f"{config.path}: {', '.join(missing)} has no entry for {rate_bps} bit/s, the rate of {where} "
            "(DCTCP marks by these thresholds; add the rate to each map)"
        )
    return config.kmin_kb[rate_bps] * 1000, config.kmax_kb[rate_bps] * 1000, config.pmax[rate_bps]
