"""Scale-out fabric kinds as data: ``astra run --platform NAME --scale-out ib-ndr|ib-xdr|roce|spectrum-x|efa|efa-p5en``.

Without ``--scale-out`` a platform's scale-out is the generic model (``platforms.FABRIC_HOP_LATENCY_NS``, the NIC's
line rate, no congestion), as before. With it, the kind gives the run's scale-out four numbers:

* the NIC's line rate: InfiniBand's generation fixes it (NDR 400, XDR 800 Gb/s); Ethernet keeps the platform's
  NIC (400 or 800 GbE);
* the NIC's achievable share of its line rate (one stream, no contention);
* the share a collective or all-to-all keeps under load at scale, once its traffic crosses the spines (the job
  spans more than one leaf switch): per-flow ECMP hashing makes elephant flows collide on a spine link, adaptive
  (per-packet) routing spreads them;
* the one-way latency: both endpoints (NIC, PCIe, RDMA stack) plus every switch on the way, one (a leaf) when the
  job fits under one leaf, three (leaf, spine, leaf) when it does not.

Where they go: the analytical network's scale-out dimension gets ``line x achievable x (under load)`` and
``latency / 2`` per hop (a Switch transfer is two hops); with ``--fabric`` (flow/congestion build the leaves and
spines and route over them) it gets ``line x achievable`` only, and the routing decides: ``--flow-ecmp hash`` for
ECMP (collisions happen in the simulation), ``split`` for adaptive routing. NCCL's model gets ``line x (under load)``:
its own protocol factors and calibration already stand for the achievable share (``nccl.NIC_EFFICIENCY``), and the
latency the kind's NCCL network plugin reports (``nccl_net_latency_us``: 0 for NCCL's own InfiniBand/RoCE transport;
aws-ofi-nccl's 75 or 35 us on EFA), which enters NCCL's choice of algorithm and protocol, not the time.

Every number names its source; a source that starts with ``ASSUMPTION`` is not a published or measured figure and is
listed as such (``astra platforms --json``, ``astra fabric --scale-out``, the run's ``platform_defaults``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from astra_sim.errors import ConfigError


#: one-way endpoint latency (ns), both ends together: NIC, PCIe and the RDMA send/receive path
ENDPOINT_LATENCY_NS = 1000
ENDPOINT_LATENCY_SOURCE = (
    "ASSUMPTION: 1 us one-way for both endpoints (NIC, PCIe, RDMA send/receive); no per-NIC figure was found. "
    "With ib-ndr's three switches it gives ~2 us one-way, the generic model's assumption (FABRIC_LATENCY_SOURCE)")

#: the share of a NIC's line rate one stream achieves: NCCL's maintainer's 24 GB/s per 200G NIC (nccl.py takes it from
#: here as NIC_EFFICIENCY, so that the run options' --scale-out choices do not import NCCL's model)
NIC_ACHIEVABLE = 24.0 / 25.0
NIC_ACHIEVABLE_SOURCE = ("S. Jeaugey (NVIDIA), NVIDIA/nccl-tests#119 (2022-11-17): 'We usually consider 24GB/s is the "
                         "peak performance per 200G NIC' = 0.96 of the line rate")

#: NVIDIA's figures for Spectrum-X and standard Ethernet under AI training load at scale (xAI Colossus, 100,000
#: Hopper GPUs): NVIDIA newsroom, "NVIDIA Ethernet Networking Accelerates World's Largest AI Supercomputer, Built by
#: xAI" (2024-10-28), as reported by StorageReview (storagereview.com/?p=137378): "maintaining a data throughput rate
#: of 95%, a significant improvement over traditional Ethernet, which typically sees only 60% data throughput and
#: frequent flow collisions"
COLOSSUS_SOURCE = ("NVIDIA's xAI Colossus announcement (2024-10-28; storagereview.com/?p=137378): Spectrum-X "
                   "'maintaining a data throughput rate of 95%', 'traditional Ethernet, which typically sees only 60% "
                   "data throughput and frequent flow collisions'")

#: one Quantum-2 (NDR) switch's port-to-port latency, ns. Third-party figures differ: "~330 ns port-to-port"
#: (yobitel.com/knowledge-base/nvidia-quantum-2), "under 150 nanoseconds" (router-switch.com, QM9700 vs SN5400),
#: "< 400ns" (systemspecbase.com); NVIDIA's datasheet was not found. 330 ns is taken.
NDR_SWITCH_LATENCY_NS = 330
NDR_SWITCH_LATENCY_SOURCE = ("yobitel.com knowledge base 'NVIDIA Quantum-2': 'Cut-through latency ~330 ns "
                             "port-to-port' (other third-party pages: <150 ns, router-switch.com; <400 ns, "
                             "systemspecbase.com; NVIDIA's own figure not found)")

#: a 51.2 Tb/s Spectrum-4 switch's ports (SN5600)
SPECTRUM4_PORTS_SOURCE = ("NVIDIA Spectrum-4 announcement (convergedigest.blogspot.com, 2022-03): 51.2 Tb/s, "
                          "'up 128 ports of 400G or 64 ports of 800G'")


@dataclass(frozen=True)
class ScaleOutKind:
    """One fabric technology's numbers, each with its source (``sources``: number name -> text)."""

    name: str
    description: str
    #: the link generation's rate per port, Gb/s; None: the platform's NIC (an Ethernet NIC at 400 or 800 GbE)
    line_gbit_per_s: float | None
    switch_latency_ns: int
    #: a collective's share of the achievable bandwidth once its traffic crosses the spines
    loaded_share: float
    #: ``adaptive`` (per-packet, the flow backend sprays: --flow-ecmp split) or ``ecmp`` (per-flow hash: hash)
    routing: str
    #: a leaf switch's ports by port speed (Gb/s): (switch, ports)
    leaf_ports: dict
    sources: dict
    #: the latency NCCL's network plugin reports (µs, NCCL's ``graph->latencyInter``): NCCL's tuning adds it to every
    #: network step, twice for Simple, and so does its choice here (``nccl.NcclConfig.net_latency_us``); 0 for NCCL's
    #: own InfiniBand/RoCE transport (``props->latency = 0``)
    nccl_net_latency_us: float = 0.0
    nccl_net_latency_source: str = ("NCCL's own InfiniBand/RoCE transport: 'props->latency = 0; // Not set' "
                                    "(NVIDIA/nccl src/transport/net_ib.cc v2.26.2-1, net_ib/init.cc 5067397)")

    def line_rate(self, platform_gbit_per_s) -> float:
        return float(self.line_gbit_per_s if self.line_gbit_per_s is not None else platform_gbit_per_s)

    def nodes_per_leaf(self, line_gbit_per_s) -> tuple[int, str]:
        """Half a leaf switch's ports down (the other half up: non-blocking), and the switch's name."""
        switch = self.leaf_ports.get(float(line_gbit_per_s))
        if switch is None:
            raise ConfigError(f"--scale-out {self.name}: no leaf switch recorded for {line_gbit_per_s:g} Gb/s ports "
                              f"(recorded: {', '.join(f'{g:g}' for g in sorted(self.leaf_ports))} Gb/s)")
        name, ports = switch
        return ports // 2, name

    def assumptions(self) -> list:
        """The names of this kind's numbers that rest on an assumption."""
        return [key for key, text in self.sources.items() if str(text).lstrip().upper().startswith("ASSUMPTION")]


#: aws-ofi-nccl, the network plugin NCCL runs over AWS's EFA (src/platform-aws.cpp at 2daf7d30, 2026-08): each
#: platform's ``.latency``, which the plugin reports to NCCL as the net device's latency (src/nccl_ofi_net.cpp
#: ``props->latency``), "Empirical testing on P5 had shown that NCCL's internal tuner choices work better with this
#: value"
AWS_OFI_SOURCE = "aws/aws-ofi-nccl src/platform-aws.cpp at 2daf7d30"
_EFA_ASSUMED = ("ASSUMPTION: AWS publishes no EFA switch latency, leaf size nor throughput under load; taken as "
                "ib-ndr's (" + NDR_SWITCH_LATENCY_SOURCE + ") and Spectrum-X's adaptive routing (EFA's SRD sprays "
                "packets over paths)")

_IB_LOADED = ("ASSUMPTION: InfiniBand's adaptive routing keeps what NVIDIA publishes for Spectrum-X, which brings "
              "it to Ethernet (0.95; " + COLOSSUS_SOURCE + "); no published InfiniBand figure under AI load was found")
_ETH_LATENCY = ("ASSUMPTION: no published port-to-port latency of a Spectrum-4 or other 51.2 Tb/s Ethernet switch was "
                f"found; taken equal to Quantum-2's {NDR_SWITCH_LATENCY_NS} ns")

KINDS = {k.name: k for k in (
    ScaleOutKind(
        "ib-ndr", "InfiniBand NDR: ConnectX-7 at 400 Gb/s, Quantum-2 switches, adaptive routing", 400.0,
        NDR_SWITCH_LATENCY_NS, 0.95, "adaptive", {400.0: ("NVIDIA Quantum-2 QM9700", 64)},
        {"line_gbit_per_s": "InfiniBand NDR: 400 Gb/s per port (NVIDIA ConnectX-7 VPI user manual, "
                            "docs.nvidia.com/networking/display/ConnectX7VPI/Introduction: 'NDR 400Gb/s')",
         "switch_latency_ns": NDR_SWITCH_LATENCY_SOURCE,
         "leaf_ports": "NVIDIA Quantum-2 QM9700: 64 ports of 400Gb/s NDR (itctshop.com/infiniband-switch-guide)",
         "loaded_share": _IB_LOADED}),
    ScaleOutKind(
        "ib-xdr", "InfiniBand XDR: ConnectX-8 at 800 Gb/s, Quantum-X800 switches, adaptive routing", 800.0,
        NDR_SWITCH_LATENCY_NS, 0.95, "adaptive", {800.0: ("NVIDIA Quantum-X800 Q3400", 144)},
        {"line_gbit_per_s": "InfiniBand XDR: 800 Gb/s per port (quantum-computing.news 'What is NVIDIA Quantum X800': "
                            "'800 Gb/s connectivity for up to 144 ports', ConnectX-8 SuperNIC 800 Gb/s)",
         "switch_latency_ns": ("ASSUMPTION: no published Quantum-X800 port-to-port latency was found; taken equal to "
                               f"Quantum-2's {NDR_SWITCH_LATENCY_NS} ns"),
         "leaf_ports": "NVIDIA Quantum-X800 Q3400-RA: 144 ports of 800 Gb/s (ziash.github.io nvidia-nca-aiio-study-"
                       "guide 2.9)",
         "loaded_share": _IB_LOADED}),
    ScaleOutKind(
        "spectrum-x", "NVIDIA Spectrum-X Ethernet: RoCE with SuperNICs (BlueField-3 / ConnectX-8), Spectrum-4 "
        "switches, per-packet adaptive routing", None, NDR_SWITCH_LATENCY_NS, 0.95, "adaptive",
        {400.0: ("NVIDIA Spectrum-4 SN5600", 128), 800.0: ("NVIDIA Spectrum-4 SN5600", 64)},
        {"line_gbit_per_s": "the platform's NIC (400 or 800 GbE SuperNIC)",
         "switch_latency_ns": _ETH_LATENCY,
         "leaf_ports": SPECTRUM4_PORTS_SOURCE,
         "loaded_share": COLOSSUS_SOURCE + ": 0.95"}),
    ScaleOutKind(
        "roce", "standard Ethernet with RoCEv2: per-flow ECMP hashing, no adaptive routing", None,
        NDR_SWITCH_LATENCY_NS, 0.60, "ecmp",
        {400.0: ("a 51.2 Tb/s Ethernet switch", 128), 800.0: ("a 51.2 Tb/s Ethernet switch", 64)},
        {"line_gbit_per_s": "the platform's NIC (400 or 800 GbE)",
         "switch_latency_ns": _ETH_LATENCY,
         "leaf_ports": "ASSUMPTION: a 51.2 Tb/s switch as Spectrum-4 (" + SPECTRUM4_PORTS_SOURCE + ")",
         "loaded_share": COLOSSUS_SOURCE + ": 0.60 ('standard' Ethernet's ECMP flow collisions)"}),
    *(ScaleOutKind(
        name, f"AWS Elastic Fabric Adapter ({machines}) through the aws-ofi-nccl plugin, which reports "
        f"{latency:g} us of network latency to NCCL's tuner", None, NDR_SWITCH_LATENCY_NS, 0.95, "adaptive",
        {400.0: ("an EFA fabric switch", 64), 800.0: ("an EFA fabric switch", 64)},
        {"line_gbit_per_s": f"the platform's NIC ({machines}: {rate})",
         "switch_latency_ns": _EFA_ASSUMED, "leaf_ports": _EFA_ASSUMED, "loaded_share": _EFA_ASSUMED},
        latency, f"{AWS_OFI_SOURCE}: platform '{entry}' .latency = {latency:g}")
      for name, machines, rate, entry, latency in (
          ("efa", "p5.48xlarge / p5e: 8 H100 / H200, EFAv2", "3200 Gb/s a node, 400 a GPU", "p5/p5e", 75.0),
          ("efa-p5en", "p5en / p6-b200: 8 H200 / B200, EFAv3", "3200 Gb/s a node, 400 a GPU", "p5en/p6-b200",
           35.0))),
)}


def get_kind(name, where="--scale-out") -> ScaleOutKind:
    key = str(name).strip().lower()
    if key not in KINDS:
        raise ConfigError(f"{where}: unknown scale-out kind {name!r}; expected one of {', '.join(KINDS)}")
    return KINDS[key]


@dataclass(frozen=True)
class ScaleOut:
    """A kind on ``nodes`` nodes of a platform whose NICs run at ``platform_gbit_per_s``: the run's numbers."""

    kind: ScaleOutKind
    nodes: int
    line_gbit_per_s: float
    nodes_per_leaf: int
    leaf_switch: str

    @property
    def at_scale(self) -> bool:
        """The job spans more than one leaf: its traffic crosses the spines (ECMP or adaptive routing matters)."""
        return self.nodes > self.nodes_per_leaf

    @property
    def switches(self) -> int:
        """Switches a message crosses: its leaf, or leaf, spine, leaf."""
        return 3 if self.at_scale else 1

    def one_way_latency_ns(self) -> int:
        return ENDPOINT_LATENCY_NS + self.switches * self.kind.switch_latency_ns

    def hop_latency_ns(self) -> float:
        """The analytical Switch's per-hop latency: a transfer is two hops."""
        return self.one_way_latency_ns() / 2

    def loaded_share(self) -> float:
        return self.kind.loaded_share if self.at_scale else 1.0

    def achievable_gbit_per_s(self) -> float:
        return self.line_gbit_per_s * NIC_ACHIEVABLE

    def effective_gbit_per_s(self) -> float:
        """What a collective gets per GPU: achievable, and past one leaf, under load."""
        return self.achievable_gbit_per_s() * self.loaded_share()

    def nccl_gb_per_s(self) -> float:
        """NCCL's model's NIC rate (GB/s per direction): the line rate under load (its own factors do the rest)."""
        return self.line_gbit_per_s / 8.0 * self.loaded_share()

    def flow_ecmp(self) -> str:
        return "split" if self.kind.routing == "adaptive" else "hash"

    def numbers(self) -> dict:
        """What ``astra fabric --scale-out``, ``astra platforms --json`` and the run's defaults show."""
        kind = self.kind
        return {
            "kind": kind.name, "description": kind.description, "nodes": self.nodes,
            "line_gbit_per_s": self.line_gbit_per_s, "nic_achievable_share": round(NIC_ACHIEVABLE, 6),
            "nodes_per_leaf": self.nodes_per_leaf, "leaf_switch": self.leaf_switch, "at_scale": self.at_scale,
            "loaded_share": kind.loaded_share, "loaded_share_applied": self.loaded_share(),
            "effective_gbit_per_s": round(self.effective_gbit_per_s(), 6),
            "switch_latency_ns": kind.switch_latency_ns, "switches_crossed": self.switches,
            "endpoint_latency_ns": ENDPOINT_LATENCY_NS, "one_way_latency_ns": self.one_way_latency_ns(),
            "routing": kind.routing, "flow_ecmp": self.flow_ecmp(),
            "nccl_net_latency_us": kind.nccl_net_latency_us,
            "assumptions": ["endpoint_latency_ns"] + kind.assumptions(),
            "sources": {**kind.sources, "nic_achievable_share": NIC_ACHIEVABLE_SOURCE,
                        "endpoint_latency_ns": ENDPOINT_LATENCY_SOURCE,
                        "nccl_net_latency_us": kind.nccl_net_latency_source},
        }


def scale_out(name, nodes, platform_gbit_per_s, where="--scale-out") -> ScaleOut:
    """Kind ``name`` over ``nodes`` nodes of a platform whose NICs run at ``platform_gbit_per_s`` Gb/s."""
    kind = get_kind(name, where)
    line = kind.line_rate(platform_gbit_per_s)
    if not (math.isfinite(line) and line > 0):  # pragma: no cover - platforms have a positive NIC rate
        raise ConfigError(f"{where} {kind.name}: the NIC rate must be > 0 Gb/s, got {line!r}")
    per_leaf, switch = kind.nodes_per_leaf(line)
    return ScaleOut(kind, int(nodes), line, per_leaf, switch)


def native_kind(nic_description) -> str | None:
    """The kind a platform's NIC description names (``NDR``/``XDR`` InfiniBand, ``Spectrum-X``), or None where it names
    none of them (HDR, an unnamed 400 Gb/s RDMA network...)."""
    text = str(nic_description).lower()
    if "spectrum-x" in text:
        return "spectrum-x"
    if "xdr" in text:
        return "ib-xdr"
    if "ndr" in text:
        return "ib-ndr"
    return None


__all__ = ["ENDPOINT_LATENCY_NS", "KINDS", "NIC_ACHIEVABLE", "ScaleOut", "ScaleOutKind", "get_kind", "native_kind",
           "scale_out"]
