"""Platform bundles for ``astra run --platform NAME [--nodes N]``: GPU + system + network.

A platform is ``nodes`` scale-up domains of ``gpus_per_node`` GPUs. The generated analytical network is

* dimension 1, ``Switch``: the scale-up domain (NVSwitch) with the GPU's per-direction scale-up bandwidth (from
  the gpu_model preset's ``scaleup``); for PCIe cards (``scaleup.topology: pairwise``: H100 PCIe, H100 NVL) the
  server's PCIe switch at ``scaleup.pcie_gbps``, their NVLink-bridged pairs being NCCL's model's; for AMD's
  8-GPU xGMI full mesh (``scaleup_mesh``) ``FullyConnected`` at one link's bandwidth per pair of GPUs;
* dimension 2, ``Switch``: the scale-out fabric, a non-blocking (full-bisection) fat tree between the
  nodes, rail-optimised: GPU ``i`` of every node talks through its own NIC, so the dimension has ``nodes``
  members and the per-GPU NIC bandwidth. Only written when ``nodes > 1`` (the analytical backend needs
  at least two NPUs per dimension). Messages between GPUs with different local indices on different
  nodes (a data-parallel ring when TP < 8, for instance) cross both dimensions; the YAML sets
  ``cross_dimension_route: dimension_order`` so they pay the NIC's bandwidth and both latencies, not
  the reference's NVLink-only charge for the lowest differing dimension.

Bandwidths in the YAML are GB/s with GB = 2**30 bytes (the analytical backend's unit), converted from the
vendors' decimal figures: ``gib_per_s = bytes_per_s / 2**30``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from astra_sim.errors import ConfigError
from astra_sim.platforms import Platform as _Platform, PlatformSetup, check_nodes

from astra_gpu_model.gpu import COLLECTIVES, load_gpu
from astra_gpu_model.grace_memory import GB200_GRACE, GB300_GRACE, GraceMemory

GIB = 1 << 30

#: Latency per hop (ns) in the analytical Switch model (a Switch transfer is 2 hops).
NVLINK_HOP_LATENCY_NS = 250.0
NVLINK_LATENCY_SOURCE = (
    "ASSUMPTION: ~0.5 us GPU-to-GPU through one NVSwitch / Infinity Fabric hop pair (250 ns per hop); "
    "vendors do not publish a per-hop latency"
)
FABRIC_HOP_LATENCY_NS = 1000.0
FABRIC_LATENCY_SOURCE = (
    "ASSUMPTION: ~2 us one-way NIC-to-NIC through the fat tree (1000 ns per analytical hop: NIC, "
    "PCIe and switch traversals); InfiniBand NDR switch port-to-port latency alone is ~0.2-0.5 us"
)
#: A platform's default scale-out fabric for ``--fabric`` (flow/congestion backends; the analytical backend keeps
#: its one Switch dimension): rail-optimised, non-blocking, with leaves of half a leaf switch's ports (the other
#: half up), by the NIC's line rate in Gb/s: (leaf switch, ports, source)
LEAF_SWITCHES = {
    400.0: ("NVIDIA Quantum-2 QM9700", 64, "NVIDIA Quantum-2 QM9700: 64 ports of 400Gb/s NDR InfiniBand "
            "(itctshop.com/infiniband-switch-guide)"),
    800.0: ("NVIDIA Quantum-X800 Q3400", 144, "NVIDIA Quantum-X800 Q3400-RA: 144 ports of 800 Gb/s "
            "(ziash.github.io nvidia-nca-aiio-study-guide 2.9; quantum-computing.news 'What is NVIDIA Quantum X800')"),
}


def default_fabric(nic_gbit_per_gpu) -> dict:
    """The fabric ``--fabric rail`` builds for a platform whose NICs run at ``nic_gbit_per_gpu`` Gb/s: rail-optimised,
    oversubscription 1, ``nodes_per_leaf`` half the ports of the leaf switch of that speed (a 400 Gb/s leaf's for
    other speeds, an assumption)."""
    switch = LEAF_SWITCHES.get(float(nic_gbit_per_gpu))
    if switch is None:
        name, ports, _ = LEAF_SWITCHES[400.0]
        source = (f"ASSUMPTION: no leaf switch recorded for {nic_gbit_per_gpu:g} Gb/s NICs; "
                  f"{ports // 2} nodes per leaf as half of a {name}'s {ports} ports")
    else:
        name, ports, source = switch
        source = f"half of a leaf's ports down, half up: {source}"
    per_leaf = ports // 2
    return {"kind": "rail", "nic_gbit_per_s": float(nic_gbit_per_gpu), "oversubscription": 1.0,
            "nodes_per_leaf": per_leaf, "planes": 1, "spec": f"rail:nodes_per_leaf={per_leaf}:over=1",
            "leaf_switch": name, "source": source}


#: the sources every GPU platform shares (the network model's own assumptions): listed in each platform's
#: ``sources``, left out of its ``assumptions``, which name what is assumed about this machine
SHARED_SOURCES = ("scaleup_latency", "fabric_latency", "fabric_topology")


#: how a source says its number is not a published or measured figure
ASSUMED_MARKERS = ("ASSUMPTION", "UNVERIFIED")


def _assumed(text) -> bool:
    return str(text).lstrip().upper().startswith(ASSUMED_MARKERS)


def machine_assumptions(sources, gpu) -> list:
    """The names of a machine's numbers that rest on an assumption (their source starts with ``ASSUMPTION`` or
    ``UNVERIFIED``): the platform's own ``sources``, then its GPU's (``gpu``, a GpuSpec) as ``gpu.<key>``.
    ``astra platforms --json`` and the run's report list them, so that no one takes them for published or measured
    figures."""
    names = [key for key, text in sources.items() if key not in SHARED_SOURCES and _assumed(text)]
    names += [f"gpu.{key}" for key, text in (gpu.raw.get("sources") or {}).items() if _assumed(text)]
    return names


@dataclass(frozen=True)
class Platform(_Platform):
    """A GPU machine: ``gpus_per_node`` GPUs of the gpu_model preset ``gpu`` per node, one NIC per GPU."""

    name: str
    description: str
    gpu: str                     # gpu_model preset name
    gpus_per_node: int
    nic_gbit_per_gpu: float      # per-GPU NIC line rate, Gb/s (decimal), per direction
    nic: str
    sources: dict
    scaleup_note: str = ""
    #: the scale-out switches reduce (InfiniBand SHARP): NCCL's model may use CollNet across nodes, and the
    #: network YAML lets ``inSwitch`` run on the fabric dimension
    sharp: bool = False
    #: a Grace superchip's CPU memory over NVLink-C2C, the run's remote memory (MEM_LOAD/MEM_STORE nodes)
    grace_memory: GraceMemory | None = None
    #: the node's GPUs are a full mesh, one link per pair (AMD's xGMI): the network's first dimension is
    #: FullyConnected at one link's bandwidth (the preset's ``scaleup.bandwidth_per_port_gbps``), so that a send
    #: between two GPUs gets one link; collectives keep NCCL's (RCCL's) model over all links (:func:`network_yaml`)
    scaleup_mesh: bool = False
    #: the GPUs' board power limit (W) where the machine runs them above their preset's ``tdp_w`` (a rack's compute
    #: trays, whose presets are the HGX parts: ``gpu_proxy``), with its source in ``sources["board_power_w"]``; None:
    #: the preset's TDP. The gpu model's sustained GEMM clock is taken at it (astra_gpu_model.power_clock)
    board_power_w: float | None = None

    family = "gpu"

    def all_sources(self) -> dict:
        """The platform's sources with its Grace memory's (``grace_memory.<number>``)."""
        return {**self.sources, **(self.grace_memory.all_sources() if self.grace_memory else {})}

    def describe(self, nodes: int = 1) -> dict:
        return self.numbers(nodes)

    def device_memory_bytes(self) -> int | None:
        """The GPU's HBM capacity, bytes (``GpuSpec.hbm_capacity_bytes``: a datasheet's GB of HBM are GiB); None
        when its YAML has none."""
        return load_gpu(self.gpu).hbm_capacity_bytes

    def peak_tflops(self, dtype="bf16") -> float | None:
        """The GPU's dense tensor-core TFLOP/s in ``dtype`` (its preset's or YAML's)."""
        return load_gpu(self.gpu).tensor_tflops.get(dtype)

    def device_peak_tflops(self, dtype, options) -> float | None:
        """The peak of the GPU the run uses: the resolved ``gpu`` option (the platform's, or ``--gpu``); a
        block-scaled format's (nvfp4, mxfp8, mxfp4) is the rate it runs at (:meth:`GpuSpec.dtype_tflops`)."""
        return load_gpu(options.get("gpu") or self.gpu).dtype_tflops(dtype)

    def variant(self, **changes) -> "Platform":
        """``gpus_per_node``, ``nic_gbps`` (GB/s per GPU, decimal) or ``gpu`` (a preset name or GPU YAML) changed."""
        from dataclasses import replace

        unknown = sorted(set(changes) - {"gpus_per_node", "nic_gbps", "gpu"})
        if unknown:
            raise ConfigError(f"platform {self.name}: cannot vary {', '.join(unknown)} "
                              "(variable: gpus_per_node, nic_gbps, gpu)")
        fields = {}
        if "gpus_per_node" in changes:
            fields["gpus_per_node"] = int(changes["gpus_per_node"])
        if "nic_gbps" in changes:
            fields["nic_gbit_per_gpu"] = 8.0 * float(changes["nic_gbps"])
        if changes.get("gpu"):
            fields["gpu"] = changes["gpu"]
        return replace(self, **fields)

    def gpu_of(self, options: dict) -> str:
        """The GPU a run with ``options`` computes on: its explicit ``--gpu`` (:func:`explicit_gpu`) instead of the
        platform's; what :func:`resolve_gpu_platform` times the run on and the LLM generator generates for
        (``LlmSpec.for_platform``)."""
        return explicit_gpu(options) or self.gpu

    def resolve(self, nodes: int, options: dict) -> PlatformSetup:
        """The platform as the machine it names: its GPU timing the compute, NCCL's model for the collectives,
        a host launching kernels at the measured rate and communication kernels slowing the kernels beside them
        as measured; every option the user gave explicitly wins (``defaults`` says which)."""
        return resolve_gpu_platform(self, nodes, options)

    def scaleup_gb_per_s(self, gpu=None) -> float:
        """Per-GPU scale-up bandwidth per direction, decimal GB/s (from the GPU preset): a PCIe card's node
        (``scaleup.topology: pairwise``) is its PCIe switch, ``scaleup.pcie_gbps``; its NVLink-bridged pairs are
        NCCL's model's (``nccl.config_for_gpu``). ``gpu``: the platform's GpuSpec where the caller loaded it."""
        gpu = load_gpu(self.gpu) if gpu is None else gpu
        if gpu.scaleup_topology == "pairwise":
            return float(gpu.scaleup["pcie_gbps"])
        bw = gpu.scaleup_bandwidth_gbps
        if bw is None:  # pragma: no cover - every preset used here describes its scale-up links
            raise ConfigError(f"GPU preset {self.gpu} has no scaleup bandwidth")
        return float(bw)

    def numbers(self, nodes: int = 1) -> dict:
        gpu = load_gpu(self.gpu)
        scaleup = self.scaleup_gb_per_s(gpu)  # (one load: a serving run describes the platform once per new shape)
        nic_bytes = self.nic_gbit_per_gpu * 1e9 / 8
        return {
            "name": self.name,
            "description": self.description,
            "gpu": gpu.name,
            # (major, minor) of an NVIDIA GPU (its preset's architecture), None otherwise: what the LLM generator's
            # GPU-specific kernels read (LlmSpec's platform: Transformer Engine's FP8 transposes)
            "compute_capability": list(gpu.compute_capability) if gpu.compute_capability else None,
            "gpus_per_node": self.gpus_per_node,
            "nodes": nodes,
            "total_gpus": self.gpus_per_node * nodes,
            "scaleup_technology": gpu.scaleup.get("technology"),
            "scaleup_topology": gpu.scaleup_topology,
            **({"nvlink_bridge_gb_per_s_per_direction": gpu.scaleup_bandwidth_gbps}
               if gpu.scaleup_topology == "pairwise" else {}),
            "scaleup_gb_per_s_per_direction": scaleup,
            "scaleup_gib_per_s_per_direction": round(scaleup * 1e9 / GIB, 6),
            "nic": self.nic,
            "nic_gbit_per_s_per_gpu": self.nic_gbit_per_gpu,
            "nic_gib_per_s_per_gpu": round(nic_bytes / GIB, 6),
            "nics_per_node": self.gpus_per_node,
            "scaleup_hop_latency_ns": NVLINK_HOP_LATENCY_NS,
            "fabric_hop_latency_ns": FABRIC_HOP_LATENCY_NS,
            "hbm_bandwidth_gbps": gpu.hbm_bandwidth_gbps,
            "hbm_capacity_gb": gpu.hbm_capacity_gb,
            "bf16_tflops": gpu.tensor_tflops.get("bf16"),
            "tdp_w": gpu.tdp_w,
            "board_power_w": self.board_power_w or gpu.tdp_w,  # the limit the GPU runs at on this machine
            # how far the GPU's GEMM efficiencies were measured on it (gpu.CALIBRATION_STATUSES)
            "calibration": gpu.calibration_status,
            # this machine's numbers whose source is an assumption (each one's why is in sources)
            "assumptions": machine_assumptions(self.all_sources(), gpu),
            "sources": {
                "gpu": f"astra_gpu_model preset {gpu.name} (its own `sources:`)",
                "scaleup": gpu.raw.get("sources", {}).get("scaleup", ""),
                **self.all_sources(),
                "scaleup_latency": NVLINK_LATENCY_SOURCE,
                "fabric_latency": FABRIC_LATENCY_SOURCE,
                "fabric_topology": "ASSUMPTION: non-blocking rail-optimised fat tree between nodes, modelled as one "
                                   "analytical Switch dimension per rail (no oversubscription, no congestion); "
                                   "a message between different local GPUs of different nodes crosses both "
                                   "dimensions (cross_dimension_route: dimension_order)",
            },
            **({"scaleup_note": self.scaleup_note} if self.scaleup_note else {}),
            **({"sharp": True} if self.sharp else {}),
            **({"grace_memory": self.grace_memory.numbers()} if self.grace_memory else {}),
            **({"scaleup_link_gb_per_s_per_direction": float(gpu.scaleup["bandwidth_per_port_gbps"])}
               if self.scaleup_mesh else {}),
            # what --fabric builds for the flow/congestion backends (the analytical network above keeps one Switch)
            "fabric": default_fabric(self.nic_gbit_per_gpu),
            # the fabric technology the NIC names, and what --scale-out offers (the generic model without it)
            "scale_out": _scale_out_numbers(self, nodes),
        }


def _scale_out_numbers(platform: Platform, nodes: int) -> dict:
    """``astra platforms --json``'s ``scale_out``: the kind the platform's NIC names (its numbers on ``nodes``
    nodes) or None, and the kinds ``--scale-out`` accepts."""
    from astra_gpu_model.scale_out import KINDS, native_kind, scale_out

    kind = native_kind(platform.nic)
    return {"kind": kind, "choices": list(KINDS),
            "note": "the run uses the generic model (line rate, fabric_latency) unless --scale-out KIND is given",
            **({"numbers": scale_out(kind, nodes, platform.nic_gbit_per_gpu).numbers()} if kind else {})}


#: the PCIe H100 platforms' shared assumptions (h100-pcie, h100-nvl)
_PCIE_SERVER_NIC = ("ASSUMPTION: one 400 Gb/s ConnectX-7 per GPU as in NVIDIA's HGX reference designs; PCIe servers "
                    "vary (--nccl-nic-gbps)")
_BRIDGED_PAIRS_NOTE = ("No NVSwitch: the node's network dimension is the PCIe Gen5 switch (64 GB/s per direction per "
                       "GPU), which prices sends and receives; NCCL's model times the collectives over the "
                       "NVLink-bridged pairs (300 GB/s per direction) and PCIe between them (topology pairwise, no "
                       "NVLS). A send between the two GPUs of a pair is priced at PCIe, not at the bridge")

#: the AMD platforms' note on their Infinity Fabric (xGMI) mesh
_XGMI_MESH_NOTE = ("{gpu} has no switch: 7 point-to-point Infinity Fabric links per GPU, a full mesh. The network's "
                   "scale-up dimension is FullyConnected at one link's {link} GB/s per direction per pair of GPUs, so "
                   "a send between two GPUs gets one link; collectives are RCCL's model over all 7 links (7 x {link} "
                   "GB/s, the scale-up column), as RCCL's rings and MSCCL's all-pairs spread them; with --fabric the "
                   "node is the equivalent switch of 7 x {link} GB/s")

PLATFORMS = {
    p.name: p
    for p in (
        Platform(
            "dgx-a100", "NVIDIA DGX A100: 8 x A100-SXM4-80GB, NVSwitch (NVLink 3), 8 x 200 Gb/s HDR InfiniBand",
            "A100-SXM4-80GB", 8, 200.0, "ConnectX-6 HDR InfiniBand 200 Gb/s",
            {"gpus_per_node": "NVIDIA DGX A100 datasheet: 8x NVIDIA A100 80GB Tensor Core GPUs, 6x NVSwitches",
             "nic": "NVIDIA DGX A100 datasheet: 8x single-port NVIDIA ConnectX-6 VPI 200Gb/s HDR InfiniBand "
                    "(compute fabric), one per GPU"},
        ),
        Platform(
            "dgx-a100-40gb", "NVIDIA DGX A100 (320 GB): 8 x A100-SXM4-40GB, NVSwitch (NVLink 3), 8 x 200 Gb/s HDR "
            "InfiniBand", "A100-SXM4-40GB", 8, 200.0, "ConnectX-6 HDR InfiniBand 200 Gb/s",
            {"gpus_per_node": "NVIDIA DGX A100 datasheet (DGX A100 320GB): 8x NVIDIA A100 40GB Tensor Core GPUs, "
                              "6x NVSwitches",
             "nic": "NVIDIA DGX A100 datasheet: 8x single-port NVIDIA ConnectX-6 VPI 200Gb/s HDR InfiniBand "
                    "(compute fabric), one per GPU"},
        ),
        Platform(
            "hgx-h100", "NVIDIA HGX/DGX H100: 8 x H100-SXM5-80GB, NVSwitch (NVLink 4), 8 x 400 Gb/s NDR",
            "H100-SXM5-80GB", 8, 400.0, "ConnectX-7 NDR InfiniBand 400 Gb/s",
            {"gpus_per_node": "NVIDIA DGX H100 datasheet / HGX H100 8-GPU: 8x H100 SXM5, 4x third-generation NVSwitch",
             "nic": "NVIDIA DGX H100 datasheet: 8x single-port NVIDIA ConnectX-7 VPI, up to 400Gb/s "
                    "InfiniBand/Ethernet (compute fabric), one per GPU"},
        ),
        Platform(
            "h100-sharp", "NVIDIA DGX H100 SuperPOD-style cluster: 8 x H100-SXM5-80GB per node, NVSwitch "
            "(NVLink 4), 8 x 400 Gb/s NDR to NVIDIA Quantum-2 switches with SHARP (in-network reduction)",
            "H100-SXM5-80GB", 8, 400.0, "ConnectX-7 NDR InfiniBand 400 Gb/s, Quantum-2 QM9700 switches",
            {"gpus_per_node": "NVIDIA DGX H100 datasheet / HGX H100 8-GPU: 8x H100 SXM5, 4x third-generation NVSwitch",
             "nic": "NVIDIA DGX H100 datasheet: 8x single-port NVIDIA ConnectX-7 VPI, up to 400Gb/s "
                    "InfiniBand (compute fabric), one per GPU",
             "sharp": "NVIDIA Quantum-2 QM9700 datasheet: 64 ports of 400Gb/s NDR, third-generation SHARP "
                      "(SHARPv3) in-network computing; the DGX H100 SuperPOD reference architecture builds its "
                      "compute fabric from them. NCCL uses SHARP through CollNet (the nccl-rdma-sharp plugin); "
                      "its bandwidth in the NCCL model: astra_gpu_model.nccl.collnet_bw"},
            sharp=True,
        ),
        Platform(
            "hgx-h200", "NVIDIA HGX/DGX H200: 8 x H200-SXM, NVSwitch (NVLink 4), 8 x 400 Gb/s NDR",
            "H200-SXM", 8, 400.0, "ConnectX-7 NDR InfiniBand 400 Gb/s",
            {"gpus_per_node": "NVIDIA DGX H200 datasheet / HGX H200 8-GPU: 8x H200 SXM, 4x NVSwitch",
             "nic": "NVIDIA DGX H200 datasheet: 8x single-port NVIDIA ConnectX-7 VPI, up to 400Gb/s "
                    "InfiniBand/Ethernet, one per GPU"},
        ),
        Platform(
            "h100-pcie", "8 x H100 PCIe 80GB in a PCIe Gen5 server: NVLink bridges join pairs, a PCIe switch the "
            "rest (no NVSwitch), one 400 Gb/s NIC per GPU", "H100-PCIe-80GB", 8, 400.0,
            "ConnectX-7 400 Gb/s (one per GPU: ASSUMPTION)",
            {"gpus_per_node": "ASSUMPTION: an 8-card PCIe Gen5 server (e.g. NVIDIA-Certified 8-GPU PCIe systems); "
                              "NVIDIA's H100 PCIe datasheet: NVLink bridges join two cards",
             "nic": _PCIE_SERVER_NIC},
            scaleup_note=_BRIDGED_PAIRS_NOTE,
        ),
        Platform(
            "h100-nvl", "8 x H100 NVL 94GB (four NVLink-bridged pairs) in a PCIe Gen5 server, one 400 Gb/s NIC per "
            "GPU", "H100-NVL-94GB", 8, 400.0, "ConnectX-7 400 Gb/s (one per GPU: ASSUMPTION)",
            {"gpus_per_node": "ASSUMPTION: an 8-card PCIe Gen5 server; NVIDIA's H100 datasheet (H100 NVL): the cards "
                              "are bridged in pairs (NVLink 600 GB/s)",
             "nic": _PCIE_SERVER_NIC},
            scaleup_note=_BRIDGED_PAIRS_NOTE,
        ),
        Platform(
            "pcie-l40s", "8 x L40S (48 GB GDDR6) in a PCIe Gen4 server, no NVLink: the cards talk through PCIe, "
            "2 x 200 Gb/s NICs per node (50 Gb/s per GPU)", "L40S", 8, 50.0,
            "2 x 200 Gb/s RoCE/InfiniBand per node (ASSUMPTION: one per PCIe switch of 4 GPUs)",
            {"gpus_per_node": "NADDOD 'High-Performance GPU Server Hardware Topology and Cluster Networking-L40S' "
                              "(naddod.com/blog, 2023): 'Typical 4*L40S/8*L40S main unit', PCIe Gen4 switches, no "
                              "NVLink; NVIDIA L40S datasheet: PCIe Gen4 x16, NVLink not supported",
             "nic": "ASSUMPTION: 2 x 200 Gb/s per 8-GPU node, one per PCIe switch of 4 GPUs (the same NADDOD page: "
                    "'it is crucial to have a 200Gbps RoCE or IB network', host architecture '2-2-4': 2 CPUs, 2 PCIe "
                    "switches, 4 GPUs); modelled as 400 Gb/s / 8 = 50 Gb/s per GPU. No vendor's 8 x L40S server "
                    "NIC configuration was found; --nccl-nic-gbps changes it"},
            scaleup_note="No NVLink: the node's network dimension is PCIe Gen4 (32 GB/s per direction per card, the "
                         "preset's ASSUMPTION of one switch joining all eight); NCCL's model prices it as its "
                         "intra-node link at that rate (Ampere's tuning: Ada is not in its tables), without NVLS",
        ),
        Platform(
            "hgx-h20", "NVIDIA HGX H20: 8 x H20 (96 GB), NVSwitch (NVLink 4), 8 x 400 Gb/s NDR", "H20", 8, 400.0,
            "ConnectX-7 NDR InfiniBand 400 Gb/s (ASSUMPTION)",
            {"gpus_per_node": "HGX H20 8-GPU baseboard (press reports of NVIDIA's HGX H20: 8 GPUs, NVLink 900 GB/s "
                              "through NVSwitch, as HGX H100)",
             "nic": "ASSUMPTION: one 400 Gb/s ConnectX-7 per GPU, as the HGX H100 reference design; not published "
                    "for HGX H20"},
        ),
        Platform(
            "hgx-h800", "NVIDIA HGX H800: 8 x H800-SXM5-80GB, NVSwitch (NVLink 400 GB/s), 8 x 400 Gb/s InfiniBand "
            "(DeepSeek's cluster)", "H800-SXM5-80GB", 8, 400.0, "ConnectX-7 400 Gb/s InfiniBand",
            {"gpus_per_node": "DeepSeek-V3 technical report (arXiv:2412.19437) section 3.1: 'Each node in the H800 "
                              "cluster contains 8 GPUs connected by NVLink and NVSwitch within nodes'",
             "nic": "DeepSeek-V3 technical report section 3.2.2: InfiniBand at 50 GB/s per GPU (400 Gb/s), one per "
                    "GPU"},
        ),
        Platform(
            "grand-teton-h100", "Meta Grand Teton (torchtitan's benchmarks): 8 x H100 96GB HBM2e at 500 W, fully "
            "connected with NVLink, 400 Gb/s RDMA per GPU", "H100-SXM-96GB-HBM2e", 8, 400.0,
            "400 Gb/s RDMA backend network per GPU",
            {"gpus_per_node": "pytorch/torchtitan docs/performance.md: 'Each host has 8 NVIDIA H100 GPUs fully "
                              "connected with NVLink' (modelled as NVSwitch)",
             "nic": "pytorch/torchtitan docs/performance.md: 'Hosts are inter-connected with backend RDMA network "
                    "with 400 Gb/s per GPU'"},
        ),
        Platform(
            "gb200-nvl72", "NVIDIA GB200 NVL72: one 72-GPU NVLink 5 domain per rack (node = rack), "
            "1 x 400 Gb/s per GPU (64 GPUs per rack: gb200-nvl72-64)", "B200", 72, 400.0, "ConnectX-7 400 Gb/s (4 per compute tray)",
            {"gpus_per_node": "NVIDIA GB200 NVL72 datasheet: 36 Grace CPUs + 72 Blackwell GPUs in one NVLink "
                              "domain (130 TB/s aggregate NVLink = 72 x 1.8 TB/s)",
             "nic": "NVIDIA GB200 NVL72 compute tray (reference design): 4x ConnectX-7 400Gb/s for 4 Blackwell "
                    "GPUs, i.e. one 400 Gb/s NIC per GPU",
             "gpu_proxy": "ASSUMPTION: the GB200 superchip's Blackwell GPU is modelled with the HGX B200 preset "
                          "(GB200 runs at a higher power limit; its published dense FP16/BF16 rate is ~10% higher)",
             "board_power_w": "NVIDIA GB200 NVL72 / HGX B200 spec table: 'Max Thermal Design Power (TDP) | "
                              "Configurable up to 1,200W | Configurable up to 1,000W' (GB200 | HGX B200)"},
            grace_memory=GB200_GRACE, board_power_w=1200.0,
        ),
        Platform(
            "gb200-nvl72-64", "NVIDIA GB200 NVL72 racks used as 64-GPU NVLink domains (16 of 18 compute trays per "
            "rack, as MLPerf-style runs), 1 x 400 Gb/s per GPU", "B200", 64, 400.0,
            "ConnectX-7 400 Gb/s (4 per compute tray)",
            {"gpus_per_node": "ASSUMPTION: 64 of a GB200 NVL72 rack's 72 GPUs (16 of its 18 compute trays) form the "
                              "job's NVLink domain, the rest spare, as published multi-rack GB200 training runs do "
                              "(e.g. 2,496 GPUs = 39 x 64, not a multiple of 72); the rack: NVIDIA GB200 NVL72 datasheet "
                              "(72 Blackwell GPUs in one NVLink domain)",
             "nic": "NVIDIA GB200 NVL72 compute tray (reference design): 4x ConnectX-7 400Gb/s for 4 Blackwell "
                    "GPUs, i.e. one 400 Gb/s NIC per GPU",
             "gpu_proxy": "ASSUMPTION: the GB200 superchip's Blackwell GPU is modelled with the HGX B200 preset "
                          "(GB200 runs at a higher power limit; its published dense FP16/BF16 rate is ~10% higher)",
             "board_power_w": "NVIDIA GB200 NVL72 / HGX B200 spec table: 'Max Thermal Design Power (TDP) | "
                              "Configurable up to 1,200W | Configurable up to 1,000W' (GB200 | HGX B200)"},
            grace_memory=GB200_GRACE, board_power_w=1200.0,
        ),
        Platform(
            "gb300-nvl72", "NVIDIA GB300 NVL72: one 72-GPU NVLink 5 domain of Blackwell Ultra per rack (node = rack), "
            "1 x 800 Gb/s per GPU, Grace memory over NVLink-C2C", "B300", 72, 800.0,
            "ConnectX-8 SuperNIC 800 Gb/s (4 per compute tray)",
            {"gpus_per_node": "NVIDIA Enterprise Reference Architecture, NVL72 AI factory, 'System Hardware & "
                              "Components' (docs.nvidia.com/enterprise-reference-architectures/nvl72-ai-factory): "
                              "'9 NVSwitch trays for full non-blocking P2P connectivity of all 72 Blackwell Ultra "
                              "GPUs, with a total aggregated bandwidth of 130 TB/s'; compute tray: '4 Blackwell Ultra "
                              "GPUs and 2 Grace CPUs per tray'",
             "nic": "the same page: 'each compute tray includes 2 Mezzanine Network Boards with 2 ConnectX-8 silicon "
                    "chips in each, for a total of 4 ConnectX-8 Host Channel Adapters' for 4 GPUs; NVIDIA's GB300 "
                    "NVL72 launch figures (vendordeep.com): 'each GPU has ConnectX-8 SuperNIC at 800 Gb/s'",
             "gpu_proxy": "ASSUMPTION: the GB300 superchip's Blackwell Ultra GPU is modelled with the HGX B300 preset "
                          "(awesomeagents.ai 'NVIDIA GB300 NVL72': 1,400W TDP per GPU, above the preset's; verda.com "
                          "'GB300 NVL72 architecture': FP16/BF16 2.5 PFLOPS dense for GB300 vs 2.25 for B300)",
             "board_power_w": "glennklockwood.com/garden/processors/B300: 'Upgrade to 1400 W (from 1200W)', "
                              "'1400 W maximum'; awesomeagents.ai 'NVIDIA GB300 NVL72': 1,400 W per GPU"},
            grace_memory=GB300_GRACE, board_power_w=1400.0,
        ),
        Platform(
            "hgx-b200", "NVIDIA HGX/DGX B200: 8 x B200, NVSwitch (NVLink 5), 8 x 400 Gb/s", "B200", 8, 400.0,
            "ConnectX-7 400 Gb/s InfiniBand/Ethernet",
            {"gpus_per_node": "NVIDIA HGX B200 datasheet: 8x Blackwell GPUs, NVLink 5 switch, 1.8 TB/s GPU-to-GPU, "
                              "14.4 TB/s total NVLink bandwidth",
             "nic": "NVIDIA HGX B200 vs B300 table (fibermall.com, NVIDIA's HGX figures): networking bandwidth "
                    "0.8 TB/s for HGX B200 = 8 x 400 Gb/s in both directions, one ConnectX-7 per GPU"},
        ),
        Platform(
            "hgx-b300", "NVIDIA HGX B300: 8 x B300 (Blackwell Ultra), NVSwitch (NVLink 5), 8 x 800 Gb/s", "B300", 8,
            800.0, "ConnectX-8 SuperNIC 800 Gb/s",
            {"gpus_per_node": "acecloud.ai 'NVIDIA HGX B300' (2026): HGX B300 baseboard with 8x Blackwell Ultra GPUs, "
                              "NVLink 5 at 1.8 TB/s per GPU, 14.4 TB/s NVLink Switch bandwidth",
             "nic": "acecloud.ai HGX B300: 8x ConnectX-8 SuperNICs, up to 800 Gb/s per GPU; NVIDIA's HGX B300 table "
                    "(fibermall.com): networking bandwidth 1.6 TB/s (8 x 800 Gb/s in both directions)"},
        ),
        Platform(
            "mi300x", "AMD Instinct MI300X platform: 8 x MI300X, Infinity Fabric mesh, 8 x 400 Gb/s",
            "MI300X", 8, 400.0, "400 Gb/s InfiniBand/Ethernet (one per GPU)",
            {"gpus_per_node": "AMD Instinct MI300X Platform datasheet: 8x MI300X OAM on a UBB 2.0 baseboard",
             "nic": "Typical deployment, not an AMD part: Microsoft Azure ND MI300X v5 (8x 400 Gb/s NVIDIA "
                    "Quantum-2 ConnectX-7 InfiniBand per VM, one per GPU); Dell PowerEdge XE9680 MI300X offers "
                    "the same 8x 400G",
             "scaleup_mesh": "AMD ROCm blog 'Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct "
                             "MI300X' (2025-03-02, ROCm/rocm-blogs blogs/software-tools-optimization/mi300x-rccl-xgmi): "
                             "'Each AMD Instinct MI300X system GPU is connected to its seven peer GPUs via xGMI links, "
                             "forming a fully connected mesh'; 'xGMI's raw bandwidth is rated up to 64 GB/s for each "
                             "point-to-point link between GPUs' (448 GB/s = 7 x 64 GB/s per GPU)"},
            scaleup_note=_XGMI_MESH_NOTE.format(gpu="MI300X", link="64"),
            scaleup_mesh=True,
        ),
        Platform(
            "mi325x", "AMD Instinct MI325X platform: 8 x MI325X, Infinity Fabric mesh, 8 x 400 Gb/s",
            "MI325X", 8, 400.0, "400 Gb/s InfiniBand/Ethernet (one per GPU: ASSUMPTION)",
            {"gpus_per_node": "AMD Instinct MI325X Platform (unanswered.io / wiaix.com summaries of AMD's material): "
                              "8x MI325X OAM on a UBB 2.0 baseboard, fully meshed Infinity Fabric, a drop-in "
                              "replacement for the MI300X platform",
             "nic": "ASSUMPTION: one 400 Gb/s NIC per GPU, as the MI300X platform's deployments (Azure ND MI300X v5); "
                    "not an AMD part",
             "scaleup_mesh": "the MI325X platform's fully meshed Infinity Fabric (gpus_per_node's source); one link "
                             "of 64 GB/s per direction per pair as MI300X (the preset's scaleup source)"},
            scaleup_note=_XGMI_MESH_NOTE.format(gpu="MI325X", link="64"),
            scaleup_mesh=True,
        ),
        Platform(
            "mi355x", "AMD Instinct MI355X platform: 8 x MI355X, Infinity Fabric mesh, 8 x 400 Gb/s",
            "MI355X", 8, 400.0, "400 Gb/s (one per GPU: ASSUMPTION, e.g. AMD Pensando Pollara 400)",
            {"gpus_per_node": "AMD MI350-series platform (Tom's Hardware, ISC 2025): 8-GPU MI350X/MI355X platforms; "
                              "jaredwatkins.com MI350 notes: 8-GPU OCP platform trays",
             "nic": "ASSUMPTION: one 400 Gb/s NIC per GPU (jaredwatkins.com MI350 notes: a 400 Gbps network per GPU); "
                    "deployments vary (--nccl-nic-gbps)",
             "scaleup_mesh": "ASSUMPTION: a full mesh of 7 links per GPU as MI300X (no AMD figure for the MI355X "
                             "platform's topology was found); 76.8 GB/s per direction per link (the preset's scaleup "
                             "source)"},
            scaleup_note=_XGMI_MESH_NOTE.format(gpu="MI355X", link="76.8"),
            scaleup_mesh=True,
        ),
    )
}


def platform_names():
    return list(PLATFORMS)


def get_platform(name) -> Platform:
    key = str(name).strip().lower()
    if key not in PLATFORMS:
        raise ConfigError(f"unknown --platform {name!r}; known platforms: {', '.join(PLATFORMS)} "
                          "(see `astra platforms`)")
    return PLATFORMS[key]


def network_yaml(platform: Platform, nodes: int, scale_out=None, mesh=True) -> str:
    """The analytical-network YAML for ``nodes`` nodes of ``platform`` (bandwidth in GiB/s). ``scale_out``: the
    fabric dimension's ``(Gb/s per GPU, ns per hop, label)`` from ``--scale-out`` (:mod:`astra_gpu_model.scale_out`)
    instead of the NIC's line rate and :data:`FABRIC_HOP_LATENCY_NS`. ``mesh`` False: a ``scaleup_mesh`` node as
    its equivalent switch (all links' bandwidth), what ``--fabric``'s builder takes."""
    numbers = platform.numbers(nodes)
    topology = ["Switch"]
    npus = [platform.gpus_per_node]
    bandwidth = [numbers["scaleup_gib_per_s_per_direction"]]
    latency = [NVLINK_HOP_LATENCY_NS]
    if platform.scaleup_mesh and mesh:  # one link per pair, one hop of the switch's two hops' latency (~0.5 us)
        topology = ["FullyConnected"]
        bandwidth = [round(numbers["scaleup_link_gb_per_s_per_direction"] * 1e9 / GIB, 6)]
        latency = [2 * NVLINK_HOP_LATENCY_NS]
    route = ""
    if nodes > 1:
        route = ("# messages crossing both dimensions go through the scale-up link and the NIC (not the reference's\n"
                 "# charge in the lowest differing dimension only)\n"
                 "cross_dimension_route: dimension_order\n")
        topology.append("Switch")
        npus.append(nodes)
        if scale_out is None:
            bandwidth.append(numbers["nic_gib_per_s_per_gpu"])
            latency.append(FABRIC_HOP_LATENCY_NS)
        else:
            gbit, hop_ns, label = scale_out
            route += f"# scale-out {label}: {gbit:g} Gb/s per GPU, {hop_ns:g} ns per hop\n"
            bandwidth.append(round(gbit * 1e9 / 8 / GIB, 6))
            latency.append(hop_ns)
    return (
        f"# astra run --platform {platform.name} --nodes {nodes}: {platform.description}\n"
        "# bandwidth: GB/s with GB = 2**30 bytes, per direction per GPU; latency: ns per hop\n"
        f"topology: [ {', '.join(topology)} ]\n"
        f"npus_count: [ {', '.join(str(n) for n in npus)} ]\n"
        f"bandwidth: [ {', '.join(repr(float(b)) for b in bandwidth)} ]\n"
        f"latency: [ {', '.join(repr(float(x)) for x in latency)} ]\n"
        f"{route}"
        f"{_sharp_keys(platform, nodes)}"
    )


def _sharp_keys(platform: Platform, nodes: int) -> str:
    """A SHARP platform's switches reduce (NVLink SHARP in the NVSwitch, IB SHARP in the fabric): the network
    YAML says so for ``inSwitch``. Other platforms write nothing (the YAML's defaults)."""
    if not platform.sharp:
        return ""
    flags = ", ".join(["true"] * (2 if nodes > 1 else 1))
    return f"# NVSwitch (NVLink SHARP) and Quantum-2 (SHARPv3) switches reduce\nswitch_reduction: [ {flags} ]\n"


def system_json(platform: Platform, nodes: int, collective: str = "ring") -> dict:
    """ASTRA-sim system configuration: the kernel's usual values (astra_sim.config.default_system_config) with
    ``ring`` or ``nccl`` on every dimension (``nccl`` prices the fabric dimension with NCCL's multi-node
    model on the platform's NICs, see :func:`generate`).
    ``local-mem-bw`` (reduction cost) and ``peak-perf`` come from the GPU preset."""
    from astra_sim.config import default_system_config as system_config

    if collective not in COLLECTIVES:
        raise ConfigError(f"--platform-collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    gpu = load_gpu(platform.gpu)
    dims = 2 if nodes > 1 else 1
    config = system_config(dims, "ring", local_mem_bw=int(gpu.hbm_bandwidth_gbps),
                           peak_perf=int(gpu.tensor_tflops.get("bf16") or 0) or 900)
    # NCCL runs each communicator on its own CUDA stream: a data-parallel collective overlaps tensor- and
    # pipeline-parallel traffic instead of holding it up (the reference allows one at a time)
    config["comm-streams"] = "per-communicator"
    if collective == "nccl":
        for key in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
            config[f"{key}-implementation"] = ["nccl"] * dims
        config["preferred-dataset-splits"] = 1  # NCCL chunks internally; every split would pay its latency
    return config


def generate(name, nodes=1, collective="ring", directory=None, scale_out=None, mesh=True) -> dict:
    """The platform's system JSON and network YAML as a dict (its Platform.resolve makes the PlatformSetup): in memory
    (:class:`astra_sim.generated.GeneratedFile`, which ``astra run`` writes to a private folder only while
    it runs, and records inline in the report), or, with ``directory``, written there (paths)."""
    from astra_sim.generated import GeneratedFile, write_generated

    platform = name if isinstance(name, Platform) else get_platform(name)
    check_nodes(nodes)
    origin = f"--platform {platform.name} --nodes {nodes} --platform-collective {collective}"
    files = {
        "system_configuration": GeneratedFile(
            "system.json", json.dumps(system_json(platform, nodes, collective), indent=1) + "\n", origin),
        "network_configuration": GeneratedFile("network.yml", network_yaml(platform, nodes, scale_out, mesh), origin),
    }
    if platform.grace_memory is not None:  # the superchip's Grace memory: the remote-memory backend's tier
        files["remote_memory_configuration"] = GeneratedFile(
            "memory.json", platform.grace_memory.config_text(platform.gpus_per_node * nodes), origin)
    if directory is not None:
        files = write_generated(files, directory)
    return {
        **files,
        # a preset by its name; a GPU YAML (a variant's, or a sweep's gpu.* axes) by its path, which loads again
        "options": {"gpu": platform.gpu if load_gpu(platform.gpu).path is not None else load_gpu(platform.gpu).name,
                    # GB/s per direction (1e9 B), what the nccl collective prices the fabric dimension with
                    "nccl_nic_gbps": platform.nic_gbit_per_gpu / 8.0,
                    **({"nccl_sharp": True} if platform.sharp else {})},
    }


def describe_all(nodes=1) -> list:
    return [p.numbers(nodes) for p in PLATFORMS.values()]


def host_launch_defaults():
    """The host model's measured values (``data/host_launch.json``, from ``fit/fit_host.py``)."""
    from pathlib import Path

    with open(Path(__file__).with_name("data") / "host_launch.json") as handle:
        data = json.load(handle)
    return {"host_launch_us": data["host_launch_us"], "host_sync_us": data["host_sync_us"]}


def _scale_out(platform: Platform, nodes: int, options: dict):
    """``--scale-out KIND`` (option ``scale_out``) on ``nodes`` nodes of ``platform``: a ScaleOut, or None."""
    if options.get("scale_out") is None:
        return None
    from astra_gpu_model.scale_out import scale_out

    if nodes < 2:
        raise ConfigError(f"--scale-out {options['scale_out']}: --platform {platform.name} needs --nodes >= 2 "
                          "(one node has no scale-out fabric)")
    return scale_out(options["scale_out"], nodes, platform.nic_gbit_per_gpu)


def explicit_gpu(options: dict) -> str | None:
    """A run's ``--gpu`` where it was given (a preset name or GPU YAML other than the option's default, which a run
    without ``--gpu`` has), else None: the GPU that replaces a platform's."""
    from astra_gpu_model.gpu import DEFAULT_GPU

    gpu = options.get("gpu")
    return None if gpu in (None, DEFAULT_GPU) else gpu


def resolve_gpu_platform(platform: Platform, nodes: int, options: dict) -> PlatformSetup:
    """:meth:`Platform.resolve`: the generated configurations plus the options and defaults the platform
    implies, each explicit option (``--gpu``, ``--nccl-nic-gbps``, ``--host-*-us``, ``--gpu-contention*``,
    ``--compute-model``, ``--platform-collective``) winning over the platform's value."""
    name = platform.name
    collective = options.get("platform_collective")
    scale = _scale_out(platform, nodes, options)
    provided = generate(platform, nodes, collective or "nccl", scale_out=scale and (
        # with --fabric the flow/congestion backends route over leaves and spines: the load is simulated there
        scale.achievable_gbit_per_s() if options.get("fabric") is not None else scale.effective_gbit_per_s(),
        scale.hop_latency_ns(), scale.kind.name), mesh=options.get("fabric") is None)
    implied = dict(provided["options"])
    platform_gpu = implied["gpu"]
    if scale is not None:
        implied["nccl_nic_gbps"] = scale.nccl_gb_per_s()
        implied["scale_out_applied"] = scale.kind.name
        if scale.kind.nccl_net_latency_us:  # the kind's NCCL network plugin reports a latency (EFA: aws-ofi-nccl)
            implied["nccl_net_latency_us"] = scale.kind.nccl_net_latency_us
    if explicit_gpu(options) is not None:  # an explicit --gpu wins over the platform's GPU (Platform.gpu_of)
        implied["gpu"] = explicit_gpu(options)
    if options.get("nccl_nic_gbps") is not None:  # so does an explicit --nccl-nic-gbps
        implied["nccl_nic_gbps"] = options["nccl_nic_gbps"]
    launch, sync = options.get("host_launch_us"), options.get("host_sync_us")
    if launch is None or sync is None:
        host = host_launch_defaults()
        if launch is None:
            launch = implied["host_launch_us"] = host["host_launch_us"]
        if sync is None:
            sync = implied["host_sync_us"] = host["host_sync_us"]
    if platform.board_power_w:  # a rack tray's limit, above its preset's TDP: the gpu model's sustained GEMM clock
        implied["gpu_board_power_w"] = platform.board_power_w
    contention_model = options.get("gpu_contention_model")
    if contention_model == "off":
        contention = "off (--gpu-contention-model off: overlap is free)"
    elif options.get("gpu_contention"):
        contention = "--gpu-contention (given)"
    else:
        implied["gpu_contention"] = True
        if contention_model is None:
            contention_model = implied["gpu_contention_model"] = "measured"
        contention = ("measured slowdowns of kernels beside communication (--gpu-contention "
                      f"--gpu-contention-model {contention_model}; implied by --platform)")
    if options.get("fabric") is not None:  # --fabric: the scale-out as leaves and spines (flow, congestion)
        if nodes < 2:
            raise ConfigError(f"--fabric {options['fabric']}: --platform {name} needs --nodes >= 2 (one node has "
                              "no scale-out fabric)")
        implied["fabric_defaults"] = default_fabric(implied["nccl_nic_gbps"] * 8.0)
        if scale is not None:  # the kind's leaf switch and line rate; its routing on the flow backend
            implied["fabric_defaults"] = {
                **default_fabric(scale.line_gbit_per_s), "nodes_per_leaf": scale.nodes_per_leaf,
                "spec": f"rail:nodes_per_leaf={scale.nodes_per_leaf}:over=1", "leaf_switch": scale.leaf_switch,
                "source": f"--scale-out {scale.kind.name}: {scale.kind.sources['leaf_ports']}",
                "scale_out": scale.numbers()}
            if options.get("flow_ecmp") is None:
                implied["flow_ecmp"] = scale.flow_ecmp()
    gpu = implied["gpu"]
    assumed = machine_assumptions(platform.all_sources(), load_gpu(gpu))
    defaults = {
        "compute_model": (f"gpu (implied by --platform {name}: compute nodes are timed on its GPU; "
                          "--compute-model replay replays the traced durations)"
                          if options.get("compute_model") is None else f"{options['compute_model']} (--compute-model)"),
        "gpu": (f"{gpu} (the platform's GPU)" if gpu == platform_gpu else f"{gpu} (--gpu, instead of the "
                f"platform's {platform_gpu})"),
        "host": (f"host launches one GPU operation per {launch} us and waits {sync} us after each send/receive "
                 "marked host_waits (measured: plugins/gpu_model/calibration; --host-launch-us 0 --host-sync-us 0 "
                 "turns it off)"),
        "contention": contention,
        "collective": (f"{collective} (--platform-collective)" if collective else
                       f"nccl (implied by --platform {name}: NCCL's own algorithm choice and timing on every "
                       "dimension; --platform-collective ring for the kernel's packet-level ring)"),
    }
    if options.get("fabric") is not None:
        defaults["fabric"] = (f"--fabric {options['fabric']} on the flow and congestion backends (unset keys: "
                              f"nodes_per_leaf={implied['fabric_defaults']['nodes_per_leaf']}, over=1, the platform's "
                              "NIC); the analytical backend ignores it (one Switch dimension per rail) and so do "
                              "NCCL-model collectives (--platform-collective ring puts them on the links)"
                              + ("; the node's xGMI mesh is its equivalent switch (all its links)"
                                 if platform.scaleup_mesh else ""))
    if scale is not None:
        info = scale.numbers()
        defaults["scale_out"] = (
            f"--scale-out {scale.kind.name}: {info['line_gbit_per_s']:g} Gb/s x {info['nic_achievable_share']:g} "
            f"achievable x {info['loaded_share_applied']:g} under load ("
            + ("past one leaf of " if scale.at_scale else "within one leaf of ") + f"{scale.nodes_per_leaf} nodes) = "
            f"{info['effective_gbit_per_s']:g} Gb/s per GPU on the analytical network"
            + (" (with --fabric: the achievable rate, the load simulated by the routing, --flow-ecmp "
               f"{scale.flow_ecmp()})" if options.get("fabric") is not None else "")
            + f"; NCCL's model {scale.nccl_gb_per_s():g} GB/s (line x under load)"
            + (" but --nccl-nic-gbps given wins" if options.get("nccl_nic_gbps") is not None else "")
            + f"; one-way {info['one_way_latency_ns']} ns"
            + (f"; NCCL's network plugin reports {info['nccl_net_latency_us']:g} us, which NCCL's choice of algorithm "
               "and protocol adds to every network step (twice for Simple)" if info["nccl_net_latency_us"] else "")
            + f"; assumed: {', '.join(info['assumptions'])} (astra fabric --scale-out gives each source)")
    if platform.grace_memory is not None:
        grace = platform.grace_memory
        defaults["remote_memory"] = (
            f"{grace.superchip} Grace memory over NVLink-C2C: MEM_LOAD/MEM_STORE take {grace.latency_ns} ns + size / "
            f"{grace.bandwidth_bytes_per_ns()} GB/s, one FIFO per Grace shared by its {grace.gpus_per_cpu} GPUs "
            "(--remote-memory-configuration replaces it)")
    if assumed:  # what about this machine no datasheet or measurement gives
        defaults["assumptions"] = (f"{', '.join(assumed)}: assumed, not published or measured figures "
                                   f"(astra platforms --json gives each one's reason)")
    return PlatformSetup(provided["system_configuration"], provided["network_configuration"],
                         remote_memory_configuration=provided.get("remote_memory_configuration"), options=implied,
                         compute_model="gpu", defaults=defaults)
