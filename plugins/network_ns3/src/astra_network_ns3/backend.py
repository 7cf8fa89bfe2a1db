"""The ``ns3`` backend: every message is TCP traffic in the real ns-3 (the ``ns3`` package, cppyy bindings).

Model
    NPUs and switches are ns-3 nodes; every topology link is a point-to-point link of its rate and delay.
    Routing is the glue's own ns-3 routing protocol: shortest paths through switches with per-flow ECMP
    (each node hashes source, destination and ports to pick one of its next hops, so a connection keeps
    one path; ns-3 3.44's global routing offers only per-packet random ECMP, which reorders TCP). Switch ports queue in RED with ECN marking from
    K_min/K_max/P_max of the port's rate (instantaneous queue, everything above K_max marked) when CC_MODE is
    DCTCP and ENABLE_QCN is 1, else in a FIFO; each port holds BUFFER_SIZE / (the switch's port count)
    (ns-3 has no shared switch buffer). Hosts queue in a FIFO of 1 GiB. Messages between one pair of NPUs
    share one TCP connection (ns-3's ``TcpDctcp`` or ``TcpNewReno``, segment = PACKET_PAYLOAD_SIZE), in
    order: a message arrives when its last byte has been delivered in order, so a pair's messages arrive in
    the order they were sent (the reference's FIFO receive order).

Lockstep
    The C++ glue (``glue.cc``, compiled once and cached, or by cppyy: see :mod:`~astra_network_ns3.glue`) owns
    every packet. Python enters ns-3 once per message (the flow starts at exactly the send's time) and once per
    slice: a ``pump`` event, booked last at its time, runs ns-3 up to the engine's next event time, or up to the first message completion,
    which is booked on the engine at its exact ns. So kernel time and ns-3 time never pass each other.

Failed links
    The run option ``failed_links`` (node-id pairs of the topology file, set by ``astra cluster``) leaves those
    cables out of the ns-3 world: the routes are computed over the links left, so traffic goes around them for
    the whole run. The run option ``link_failures`` (``[{link: [a, b], at_ns: T}]``) takes a cable down in the
    middle of the run, as ``network_cfg.txt``'s ``LINK_DOWN T_us a b`` does (at 2 s + ``T_us``, as in ASTRA-sim's
    ns-3; see :data:`~astra_network_ns3.inputs.LINK_DOWN_BASE_NS`): at ``T`` both ends' IPv4 interfaces go down (``Ipv4::SetDown``), so
    the packets then on the cable or in its ports' queues are lost, and every node's routes are computed again
    over the links left. TCP retransmits the lost packets over the new routes (the report's ``link_failures``
    counts them, ``packets_lost``). A connection with bytes in flight and no route left is a SimulationError
    naming the cable, and so is a loss under DCQCN (``CC_MODE 1``, no retransmission): never a hang.

ns-3 is loaded when the backend is built (the cached compiled glue: well under a second; cppyy: about 10 s), never
when the plugin is loaded.
"""

from __future__ import annotations

import os
import statistics
from collections import deque

from astra_sim.errors import ConfigError, SimulationError

from astra_network_ns3.glue import load_glue
from astra_network_ns3.inputs import (
    SUPPORTED_CC, check_cc_mode, ecn_thresholds, read_config_topology, read_logical_topology, read_network_cfg,
    config_link_failures, link_failures, without_links,
)

#: Bytes of headers on every TCP segment: PPP 2 + IPv4 20 + TCP 20 + timestamp option 12.
HEADER_BYTES = 54
_HOST_QUEUE_BYTES = 1 << 30
_MIN_RTO_US = 1000
#: DCQCN's notification point sends at most one CNP per flow per this many us (the DCQCN paper's N).
DCQCN_CNP_INTERVAL_US = 50
#: ns-3 keeps time in int64 ns: a stop time past this is no bound (the reference's configs say 4e13 s).
_NS_LIMIT = 1 << 62

class _Message:
    __slots__ = ("fn", "arg", "src", "dst", "size", "start")

    def __init__(self, fn, arg, src, dst, size, start):
        self.fn = fn
        self.arg = arg
        self.src = src
        self.dst = dst
        self.size = size
        self.start = start


class Ns3Network:
    """A packet-level network on ns-3 over ASTRA-sim's ns-3 inputs (see the module docstring)."""

    def __init__(self, config, topology, npus_per_dim, engine, warn=print, fct_path=None, failed_links=None,
                 failures=None):
        check_cc_mode(config)
        self.config = config
        self.failed_links = [list(pair) for pair in failed_links or ()]
        self.topology = without_links(topology, failed_links)  # routes are computed over the links left
        #: cables that go down mid-run (network_cfg.txt's LINK_DOWN, the option link_failures): (link index, at ns)
        self.failures = config_link_failures(config, self.topology) + (
            link_failures(self.topology, failures) if failures else [])
        self.engine = engine
        self.warn = warn
        self.fct_path = fct_path
        self.hosts = topology.hosts
        self.npus_per_dim = list(npus_per_dim)
        self._warn_unmodelled()
        self._ports = []  # (node, peer, rate bit/s) per directed link, in the glue's order
        self._net = self._build()
        for number, (index, at_ns) in enumerate(self.failures):
            link = self.topology.links[index]
            self._net.ScheduleLinkDown(link.src, link.dst, at_ns, number)
        self._messages = {}
        self._next_id = 0
        self._pump_fn = self._pump  # one bound method: the engine compares it by identity
        self._pump_pending = False
        stop_ns = None if config.stop_time_s is None else int(config.stop_time_s * 1e9)
        self._stop_ns = stop_ns if stop_ns is not None and stop_ns < _NS_LIMIT else None
        self._fcts = []  # (src node, dst node, sport, size, start ns, fct ns)
        self._link_load = None
        self._paths = {}
        self.messages = 0
        self.slices = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_context(cls, context):
        path = context.network_config_path
        if path is None:
            raise ConfigError("the ns3 network backend needs --network-configuration (ASTRA-sim's network_cfg.txt)")
        config = read_network_cfg(path)
        check_cc_mode(config)
        topology = read_config_topology(config)
        options = context.options or {}
        fct_path = options.get("ns3_fct_file")
        if fct_path:  # before ns-3 starts: a typo must not cost the whole packet-level run
            from astra_sim.outputs import check_writable_folder

            check_writable_folder(os.path.dirname(os.path.abspath(fct_path)), f"--ns3-fct-file {fct_path}")
        logical = options.get("logical_topology_configuration")
        npus = len(topology.hosts)
        if logical:
            dims = read_logical_topology(logical, npus)
        else:
            dims = [npus]
        return cls(config, topology, dims, context.engine, getattr(context, "warn", print),
                   fct_path=fct_path, failed_links=options.get("failed_links"),
                   failures=options.get("link_failures"))

    def _warn_unmodelled(self):
        config = self.config
        ignored = list(config.ignored_keys)
        if config.cc_mode != 1:
            ignored += config.dcqcn_keys  # DCQCN's parameters mean nothing to TCP
        if ignored:
            self.warn(f"warning: {config.path}: keys not modelled by the ns3 backend (ignored): "
                      f"{', '.join(ignored)}")
        if config.error_rate > 0 or any(link.error_rate > 0 for link in self.topology.links):
            self.warn(f"warning: {config.path}: link error rates are not modelled (links are loss-free)")
        if config.cc_mode in (1, 8) and not config.enable_qcn:
            self.warn(f"warning: {config.path}: ENABLE_QCN 0: switches do not mark ECN, so "
                      f"{'DCQCN' if config.cc_mode == 1 else 'DCTCP'} sees no marks")

    def _plan_links(self):
        """Per topology link, its two ends' queue settings ``(K_min, K_max bytes, P_max, buffer bytes)``; checked
        before ns-3 is imported, so a missing ECN threshold costs no import."""
        config = self.config
        topology = self.topology
        switches = set(topology.switches)
        degree = {}
        for link in topology.links:
            degree[link.src] = degree.get(link.src, 0) + 1
            degree[link.dst] = degree.get(link.dst, 0) + 1
        ecn = config.cc_mode in (1, 8) and config.enable_qcn
        buffer_bytes = int(config.buffer_mb * (1 << 20))
        plan = []
        for link in topology.links:
            ends = []
            for node, peer in ((link.src, link.dst), (link.dst, link.src)):
                if node in switches:
                    port_buffer = max(1, buffer_bytes // degree[node])
                    kmin, kmax, pmax = 0, 0, 0.0
                    if ecn:
                        where = f"{topology.path}:{link.line} (switch {node} -> {peer})"
                        kmin, kmax, pmax = ecn_thresholds(config, link.rate_bps, where)
                        if kmax >= port_buffer:
                            self.warn(f"warning: {where}: K_max {kmax} bytes is not below the port's buffer "
                                      f"{port_buffer} bytes (BUFFER_SIZE / {degree[node]} ports)")
                    ends.append((kmin, kmax, float(pmax), port_buffer))
                else:
                    ends.append((0, 0, 0.0, _HOST_QUEUE_BYTES))
                self._ports.append((node, peer, link.rate_bps))
            plan.append((link, ends))
        return ecn, plan

    def _build(self):
        config = self.config
        ecn, plan = self._plan_links()
        glue = load_glue()
        net = glue.Net()
        net.Configure(config.cc_mode, config.payload_bytes, float(config.ewma_gain or 0.0), _MIN_RTO_US)
        d = config.dcqcn
        net.ConfigureDcqcn(float(config.ewma_gain or 1.0 / 256), float(d["rate_ai_bps"]), float(d["rate_hai_bps"]),
                           float(d["min_rate_bps"]), float(d["rp_timer_us"]), float(d["alpha_interval_us"]),
                           float(d["decrease_interval_us"]), int(d["fast_recovery"]), bool(d["clamp"]),
                           float(DCQCN_CNP_INTERVAL_US))
        net.AddNodes(self.topology.nodes)
        for sid in self.topology.switches:
            net.MarkSwitch(sid)
        for link, ((kmin_a, kmax_a, pmax_a, buf_a), (kmin_b, kmax_b, pmax_b, buf_b)) in plan:
            net.AddLink(link.src, link.dst, link.rate_bps, link.delay_ns, ecn,
                        kmin_a, kmax_a, pmax_a, buf_a, kmin_b, kmax_b, pmax_b, buf_b)
        net.Finish()
        return net

    # ------------------------------------------------------------------ messages and lockstep
    def send(self, src, dst, size_bytes, fn, arg):
        hosts = self.hosts
        if not (0 <= src < len(hosts) and 0 <= dst < len(hosts)):
            raise SimulationError(f"ns3 network: message {src} -> {dst}, but the topology has {len(hosts)} NPUs")
        now = self.engine.now
        self.messages += 1
        if src == dst:
            self.engine.schedule(0, fn, arg)
            return
        down = self._down_ports(now)
        if not self._path(src, dst, down):
            links = f", with the links down by then: {self._failed_names(now)}" if down else ""
            raise SimulationError(
                f"ns3 network: no route from NPU {src} to NPU {dst} in {self.topology.path}{links} (paths cross "
                "switches only; NPUs do not forward, as in ASTRA-sim's ns-3)"
            )
        mid = self._next_id
        self._next_id += 1
        self._messages[mid] = _Message(fn, arg, src, dst, size_bytes, now)
        net = self._net
        if net.NowNs() > now:  # the lockstep's invariant: ns-3 never runs ahead of the engine
            raise SimulationError(f"ns3 network: ns-3 is at {net.NowNs()} ns but a message is sent at {now} ns")
        net.Send(hosts[src], hosts[dst], size_bytes, mid, now)
        if not self._pump_pending:
            self._pump_pending = True
            self.engine.schedule(0, self._pump_fn, object())

    def _pump(self, token):
        """Advance ns-3 to the engine's next event or to the first completion (see the module docstring)."""
        engine = self.engine
        if not engine.is_last_now(self._pump_fn, token):  # other events at this time first: they may send
            if engine.has_end_of_ns():  # so may what waits for the end of this nanosecond (engine.at_end_of_ns)
                engine.at_end_of_ns(self._pump_fn, object())
            else:
                engine.schedule(0, self._pump_fn, object())
            return
        self._pump_pending = False
        if not self._messages:
            return
        target = engine.next_time()
        stop = self._stop_ns
        limited = stop is not None and (target is None or target > stop)
        if limited:
            target = stop
        net = self._net
        self.slices += 1
        net.RunSlice(-1 if target is None else target)
        if self._link_load is not None:
            self._sample_links()
        if self.failures:
            self._check_failures()
        if self.config.cc_mode == 1 and net.Drops():
            raise SimulationError(
                f"ns3 network: a DCQCN packet was dropped at a full switch queue by {net.NowNs()} ns; DCQCN has no "
                f"retransmission and ns-3 no PFC (raise BUFFER_SIZE in {self.config.path}, or use CC_MODE 8)"
            )
        count = net.DoneCount()
        if not count:
            if target is None:
                raise SimulationError(
                    f"ns3 network: ns-3 has no events left at {net.NowNs()} ns but {len(self._messages)} "
                    "message(s) have not arrived" + (f" (links down: {self._failed_names()})" if self.failures
                                                     else "")
                )
            if limited:
                raise SimulationError(
                    f"ns3 network: SIMULATOR_STOP_TIME ({self.config.stop_time_s} s) reached with "
                    f"{len(self._messages)} message(s) in flight ({self.config.path})"
                )
            self._pump_pending = True
            engine.schedule_at(target, self._pump_fn, object())
            return
        messages = self._messages
        when = engine.now
        for i in range(count):
            message = messages.pop(net.DoneId(i))
            when = net.DoneNs(i)
            engine.schedule_at(when, message.fn, message.arg)
            self._finished(message, when, net.DoneSport(i))
        net.ClearDone()
        if messages:
            self._pump_pending = True
            engine.schedule_at(when, self._pump_fn, object())

    def _failed_names(self, upto=None):
        """The cables of ``link_failures`` down by ``upto`` ns (all: None), as 'a-b at T ns'."""
        links = self.topology.links
        return ", ".join(f"{links[i].src}-{links[i].dst} at {at} ns" for i, at in self.failures
                         if upto is None or at <= upto)

    def _check_failures(self):
        """A cable that went down cut a connection off, or lost packets DCQCN cannot resend: one clear error."""
        net = self._net
        cut = net.CutLink()
        if cut >= 0:
            index, at_ns = self.failures[cut]
            link = self.topology.links[index]
            src, dst = self.hosts.index(net.CutSrc()), self.hosts.index(net.CutDst())
            raise SimulationError(
                f"ns3 network: link {link.src}-{link.dst} went down at {at_ns} ns and left no route from NPU {src} "
                f"to NPU {dst}, with a message in flight (routes cross switches only; NPUs do not forward)"
            )
        if self.config.cc_mode == 1:
            for number, (index, at_ns) in enumerate(self.failures):
                if net.FailureDrops(number):
                    link = self.topology.links[index]
                    raise SimulationError(
                        f"ns3 network: link {link.src}-{link.dst} went down at {at_ns} ns with DCQCN packets on it; "
                        "DCQCN has no retransmission, so they are lost for good (CC_MODE 8 or 3: TCP resends them)"
                    )

    def _finished(self, message, end, sport):
        hosts = self.hosts
        self._fcts.append((hosts[message.src], hosts[message.dst], sport, message.size, message.start,
                           end - message.start))

    def _sample_links(self):
        """What every port sent during the slice just run, as its share of the port's rate (for --timeline)."""
        net = self._net
        now = int(net.NowNs())
        since = self._sampled_at
        if now <= since:
            return
        load = self._link_load
        sent = self._sampled_bytes
        for index, (_node, _peer, rate) in enumerate(self._ports):
            total = int(net.PortTxBytes(index))
            delta = total - sent[index]
            if delta:
                sent[index] = total
                load.add(index, since, now, min(1.0, delta * 8e9 / rate / (now - since)))
        self._sampled_at = now

    # ------------------------------------------------------------------ paths (timeline, fct.txt)
    def _down_ports(self, now):
        """The ports (two per cable, in the glue's order) of the cables of ``link_failures`` down by ``now``."""
        return frozenset(port for index, at_ns in self.failures if at_ns <= now for port in (2 * index, 2 * index + 1))

    def _path(self, src, dst, down=frozenset()):
        """One shortest path from rank ``src`` to rank ``dst`` as port indices (fewest hops through switches; with
        ECMP ns-3 may take another of equal length), avoiding the ports ``down``: for fct.txt's ideal FCT (the
        intact network's) and to refuse a send with no route."""
        key = (src, dst, down)
        path = self._paths.get(key)
        if path is None:
            out = {}
            for index, (node, peer, _rate) in enumerate(self._ports):
                out.setdefault(node, []).append((peer, index))
            switches = set(self.topology.switches)
            start, goal = self.hosts[src], self.hosts[dst]
            previous = {start: None}
            frontier = deque([start])
            while frontier:
                node = frontier.popleft()
                if node == goal:
                    break
                if node != start and node not in switches:
                    continue  # hosts do not forward
                for peer, index in out.get(node, ()):
                    if peer not in previous and index not in down:
                        previous[peer] = (node, index)
                        frontier.append(peer)
            path = []
            node = goal
            while previous.get(node) is not None:
                node, index = previous[node]
                path.append(index)
            path.reverse()
            self._paths[key] = path
        return path

    def record_link_load(self, link_load):
        """Report every port's bytes sent per slice of time to ``link_load`` (for --timeline): packets as ns-3
        sent them, headers and ACKs included."""
        for index, (node, peer, _rate) in enumerate(self._ports):
            link_load.names[index] = f"{self._node_name(node)} -> {self._node_name(peer)}"
        self._link_load = link_load
        self._sampled_at = int(self._net.NowNs())
        self._sampled_bytes = [0] * len(self._ports)

    def _node_name(self, node):
        if node in set(self.topology.switches):
            return f"switch {node}"
        return f"npu {self.hosts.index(node)}"

    def in_switch(self, dim):
        """The switch of logical dimension ``dim`` for ``inSwitch``, when every group of that dimension hangs off
        one common switch by links of one rate and delay (else None: ``inSwitch`` is refused there).

        The in-switch messages still travel as packets through ns-3 (up to the switch and down to the
        neighbour); the switch's reduction itself is ``inSwitch``'s formula, taken at line rate with no added
        latency and no buffer limit (ns-3's switches forward only, so there is nothing to read these from)."""
        from astra_sim.api import InSwitchSpec

        dims = self.npus_per_dim
        if not 0 <= dim < len(dims):
            return None
        stride = 1
        for size in dims[:dim]:
            stride *= size
        switches = set(self.topology.switches)
        attached = {}  # host node -> {switch: (rate, delay)}
        for link in self.topology.links:
            for host, switch in ((link.src, link.dst), (link.dst, link.src)):
                if switch in switches and host not in switches:
                    attached.setdefault(host, {})[switch] = (link.rate_bps, link.delay_ns)
        kinds = set()
        total = len(self.hosts)
        for base in range(total):
            if (base // stride) % dims[dim]:
                continue  # not the first member of its group
            members = [self.hosts[base + k * stride] for k in range(dims[dim])]
            common = set.intersection(*(set(attached.get(m, {})) for m in members))
            if not common:
                return None
            switch = min(common)
            kinds.update(attached[m][switch] for m in members)
        if len(kinds) != 1:
            return None
        rate_bps, delay_ns = kinds.pop()
        line = rate_bps / 8e9
        return InSwitchSpec(can_reduce=True, line_rate=line, reduce_rate=line, latency_ns=0, buffer_bytes=0,
                            link_latency_ns=float(delay_ns))

    # ------------------------------------------------------------------ report
    def describe(self):
        config = self.config
        return {
            "backend": "ns3",
            "network_configuration": config.path,
            "topology_file": self.topology.path,
            "nodes": self.topology.nodes,
            "switches": list(self.topology.switches),
            "links": len(self.topology.links),
            "npus_per_dim": list(self.npus_per_dim),
            "cc_mode": config.cc_mode,
            "congestion_control": SUPPORTED_CC[config.cc_mode],
            "packet_payload_bytes": config.payload_bytes,
            "ecn_marking": config.cc_mode in (1, 8) and config.enable_qcn,
            "switch_buffer_bytes": int(config.buffer_mb * (1 << 20)),
            "routing": "shortest paths through switches, per-flow ECMP (hash of addresses and ports)",
            "failed_links": self.failed_links,
            "link_failures": [{"link": [self.topology.links[i].src, self.topology.links[i].dst], "at_ns": at_ns}
                              for i, at_ns in self.failures],
            "transport": "one TCP connection per NPU pair; messages in order",
        }

    def stats(self):
        """Per directed link: bytes and packets sent, peak queue, drops and ECN marks; flow completion times."""
        net = self._net
        links = []
        packets = 0
        for index, (node, peer, rate) in enumerate(self._ports):
            sent = int(net.PortTxBytes(index))
            packets += int(net.PortTxPackets(index))
            if not sent:
                continue
            links.append({
                "link": index,
                "name": f"{self._node_name(node)} -> {self._node_name(peer)}",
                "src": node,
                "dst": peer,
                "bandwidth_bps": rate,
                "bytes": sent,
                "packets": int(net.PortTxPackets(index)),
                "peak_queue_bytes": int(net.PortPeakQueue(index)),
                "drops": int(net.PortDrops(index)),
                "ecn_marks": int(net.PortMarks(index)),
            })
        fcts = sorted(row[5] for row in self._fcts)
        summary = {"count": len(fcts)}
        if fcts:
            summary.update({
                "mean_ns": int(statistics.fmean(fcts)),
                "p50_ns": fcts[(len(fcts) - 1) // 2],
                "p99_ns": fcts[min(len(fcts) - 1, int(len(fcts) * 0.99))],
                "max_ns": fcts[-1],
            })
        if self.fct_path:
            self.write_fct(self.fct_path)
        return {
            "backend": "ns3",
            "messages": self.messages,
            "slices": self.slices,
            "packets_sent": packets,
            "drops": sum(link["drops"] for link in links),
            "cnps": int(net.Cnps()),
            "ecn_marks": sum(link["ecn_marks"] for link in links),
            "flow_completion": summary,
            "links": links,
            "link_failures": [{"link": [self.topology.links[i].src, self.topology.links[i].dst], "at_ns": at_ns,
                               "packets_lost": int(net.FailureDrops(number))}
                              for number, (i, at_ns) in enumerate(self.failures)],
        }

    def write_fct(self, path):
        """The reference's fct.txt columns: ``sip dip sport dport size start_ns fct_ns standalone_fct_ns`` (IPs
        in hex; fct from the send to the delivery of the last byte; standalone: see :meth:`_standalone_ns`)."""
        rows = []
        for src, dst, sport, size, start, fct in self._fcts:
            rows.append(f"{self._hex_ip(src)} {self._hex_ip(dst)} {sport} 5000 {size} {start} {fct} "
                        f"{self._standalone_ns(src, dst, size)}\n")
        from astra_sim.safeio import write_or_recover

        # late (a full disk): no partial file; the rows are kept in a recovered file and the ConfigError says where
        write_or_recover(path, "".join(rows).encode("utf-8"), "astra run", "--ns3-fct-file")

    def _hex_ip(self, node):
        return "%08x" % int(self._net.HostIp(node))

    def _standalone_ns(self, src_node, dst_node, size):
        """The ideal FCT: propagation + bytes with headers / the path's slowest rate. (The reference adds a
        whole base RTT because an RDMA message ends at its last ACK; here a message ends when its last byte
        is delivered, so one-way propagation is the matching ideal.)"""
        hosts = self.hosts
        path = self._path(hosts.index(src_node), hosts.index(dst_node))
        delay = {}
        for link in self.topology.links:
            delay[(link.src, link.dst)] = delay[(link.dst, link.src)] = link.delay_ns
        one_way = sum(delay[(self._ports[p][0], self._ports[p][1])] for p in path)
        slowest = min(self._ports[p][2] for p in path)
        packets = (size - 1) // self.config.payload_bytes + 1
        return one_way + int((size + packets * HEADER_BYTES) * 8e9 / slowest)
