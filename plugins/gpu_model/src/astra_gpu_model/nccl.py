"""NCCL's own cost model as a collective implementation named ``nccl``.

Two steps, kept apart on purpose:

1. **Choice** (what NCCL would run): NCCL's tuning model, ``src/graph/tuning.cc`` (NCCL 2.x; dossier §4.1),
   with NCCL's own constants and nothing fitted. For every (algorithm, protocol) pair it predicts
   ``lat + nBytes / algBw`` and picks the fastest. Algorithms RING, TREE, NVLS, COLLNET (InfiniBand
   SHARP across nodes, only where the platform declares SHARP-capable switches, :func:`collnet_bw`), NVLS_TREE and
   PAT (all-gather / reduce-scatter at one rank per node, :func:`pat_terms`); protocols LL, LL128, SIMPLE.
   One node or several (a node = the network's first dimension; NCCL's multi-node terms). An all-to-all across
   nodes is not in NCCL's tuning: it is timed as the per-peer sends NCCL runs (:func:`alltoall_across_nodes_us`).
2. **Time** (how long the chosen pair really takes): NCCL's latency and ``nBytes / algBw`` terms of that
   pair, corrected by a calibration fitted on measured all-reduce times (``data/nccl_fit.json``, written
   by ``fit/fit_nccl.py``; :mod:`astra_gpu_model.nccl_calibration`)::

       time_us = overhead_us[arch] + latency_scale[arch] * lat + (nBytes / algBw) / efficiency[arch][link/algo/proto]

   ``link`` is the path the ring runs over: ``nvswitch`` (DGX/HGX), ``bridge`` (two GPUs on an NVLink
   bridge), ``pcie`` (more than two GPUs of a pairwise machine, bounded by PCIe) or ``net`` (across nodes;
   not measured, efficiency 1.0). NCCL's model is a
   ranking heuristic: its absolute times are 15-25 % off measured kernel times (README, "NCCL cost model").

The collective does not move packets: it waits the predicted time and finishes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from astra_sim.system.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, TimedCollective

from astra_gpu_model import nccl_tuning
from astra_gpu_model.nccl_calibration import (  # step 2's calibration, re-exported (fit/fit_nccl.py, --cv, tests)
    A100_NVLINK_GBPS, BORROWED_FIT, CALIBRATION_ARCH, PEAK_BUSBW, PEAK_BUSBW_SOURCES, PEAK_STATEMENTS,
    SIMPLE_PROTOCOL_SHARE, NcclCalibration, PeakStatement, beyond_fit_efficiency, calibration_override,
    load_calibration, peak_busbw,
)
from astra_gpu_model.nccl_graph import (
    TREE_PATTERN_SHARE, TREE_PATTERN_TREE, TREE_PATTERNS, ring_bus, ring_graph, size_channels, tree_pattern,
)
from astra_gpu_model.scale_out import NIC_ACHIEVABLE

LL, LL128, SIMPLE = "LL", "LL128", "Simple"
PROTOCOLS = (LL, LL128, SIMPLE)
RING, TREE, NVLS, COLLNET, NVLS_TREE, PAT = "ring", "tree", "nvls", "collnet", "nvls_tree", "pat"
ALGORITHMS = (RING, TREE, NVLS, COLLNET, NVLS_TREE, PAT)
#: The share of a NIC's line rate an IB SHARP (CollNet) stream gets: NCCL's maintainer's rule of thumb,
#: "~20 GB/s per NIC" on 200 Gb/s (25 GB/s) HDR (https://github.com/NVIDIA/nccl/issues/320).
COLLNET_NIC_EFFICIENCY = 0.8
#: One SHARP aggregation round trip (µs, Simple): up through the switch tree and back down, assumed equal to
#: two of NCCL's network hop latencies for the tree (hwLat net tree Simple, 14 µs in NCCL's own table counts
#: both directions, so 2 x 7 µs).
COLLNET_NET_LAT_US = 14.0

#: baseLatencies[algo][proto], µs.
BASE_LAT = {TREE: (6.8, 14.0, 8.4), RING: (6.6, 14.0, 8.4), NVLS: (0.0, 0.0, 0.0), NVLS_TREE: (0.0, 0.0, 0.0)}
#: hwLatencies[NVLINK][algo][proto] and [PCI], µs (None: the pair is not available).
HW_LAT = {
    "nvlink": {TREE: (0.6, 1.25, 4.0), RING: (0.6, 1.9, 3.4), NVLS: (None, None, 25.0), NVLS_TREE: (None, None, 25.0)},
    "pci": {TREE: (1.0, 1.9, 4.0), RING: (1.0, 2.5, 5.7), NVLS: (None, None, 0.0), NVLS_TREE: (None, None, 0.0)},
    "net": {TREE: (5.0, 8.5, 14.0), RING: (2.7, 4.0, 14.0), NVLS: (None, None, 18.0), NVLS_TREE: (None, None, 20.9)},
}
#: Per-architecture caps (GB/s), each for nNodes = 1 / 2 / > 2, and the per-link NVLink constant (``link``: NCCL's
#: achievable GB/s of one link, ``link_rate``: the datasheet's GB/s per direction of that link). ``nvls_tree``:
#: NCCL's perChMaxNVLSTreeBws (src/graph/tuning.cc, NVIDIA/nccl master 2026-06). Blackwell's link is NVLink 5's
#: 50 GB/s per direction (B200 preset: "18 links x 50 GB/s per direction"), so NCCL's 40.1 is 18 x 40.1 = 721.8 GB/s
#: per GPU, the "maxBw 721.8" NCCL logs on 8 B200 (NVIDIA/nccl#1807).
ARCH = {
    "volta": dict(ll_max=(39.0, 39.0, 20.4), ring_ll128=(20.0,) * 3, tree_ll128=(20.0,) * 3,
                  tree=(26.5, 18.5, 10.0), nvls_eff=0.0, link=20.0, link_rate=25.0),
    "ampere": dict(ll_max=(87.7, 22.5, 19.0), ring_ll128=(20.0,) * 3, tree_ll128=(20.0,) * 3,
                   tree=(24.0, 23.6, 17.8), nvls_eff=0.0, link=20.0, link_rate=25.0),
    "hopper": dict(ll_max=(141.0, 45.0, 35.0), ring_ll128=(36.7,) * 3, tree_ll128=(36.7, 36.7, 29.0),
                   tree=(38.7, 41.4, 36.0), nvls_eff=0.85, link=20.6, link_rate=25.0, nvls_tree=(0.0, 57.7, 45.5)),
    "blackwell": dict(ll_max=(282.0, 90.0, 70.0), ring_ll128=(40.0,) * 3, tree_ll128=(55.6, 31.67, 20.0),
                      tree=(70.0, 42.8, 24.0), nvls_eff=0.74, link=40.1, link_rate=50.0, nvls_tree=(0.0, 96.0, 80.0)),
}
#: AMD Instinct (CDNA 3, and CDNA 4 by ASSUMPTION): RCCL's own tuning model is not reproduced; NCCL's Ampere caps and
#: per-link constant stand in for its choice (ASSUMPTION), on the preset's aggregate Infinity Fabric bandwidth. The
#: times have their own calibration, fitted on a published MI300X sweep (``data/published_rccl_all_reduce_mi300x.csv``).
ARCH["cdna3"] = dict(ARCH["ampere"])
#: NVLS inside each node and a tree between nodes (NCCL's NVLSTree) is a candidate on these architectures: NCCL's
#: perChMaxNVLSTreeBws has non-zero 2-node and >2-node entries for Hopper (57.7, 45.5) and Blackwell (96.0, 80.0)
#: (src/graph/tuning.cc, NVIDIA/nccl 5067397), and NVIDIA says of 8-GPU H100 hosts with IB: "You should see NVLS
#: being used with single-node runs, NVLSTree with multi-node" (kiskra-nvidia, NVIDIA/nccl-tests#309, 2025-05-21;
#: that thread's 2-host sweep is a registry check, nccl-allreduce-h100-2node-ib-*: 468 GB/s busbw at 8 GiB, where the
#: ring this model ran before Hopper had the candidate gave 369).
NVLS_TREE_ARCHS = ("hopper", "blackwell")
#: RCCL on an 8-GPU AMD Instinct node runs all-reduces up to 16 MiB with MSCCL's all-pairs algorithm (every GPU
#: exchanges a slice with each of its 7 peers over its own Infinity Fabric link, in two steps: reduce-scatter, then
#: all-gather) instead of its 14-step ring: RCCL's shipped algorithms (ROCm/rccl tools/msccl-algorithms/
#: allreduce-allpairs-8n-*.xml at 0cbce2a, 2024-10: proto LL for 0 B - 512 KiB, Simple for 512 KiB - 11 MiB and
#: 14 - 16 MiB; "the best performing algorithm (xml file) is picked" per size, ROCm/rccl#1088, "msccl algorithms
#: tuning for allreduce on MI300"). Each window: (min bytes, max bytes, protocol).
MSCCL_ALLPAIRS = "msccl_allpairs"
MSCCL_ALLPAIRS_WINDOWS = ((0, 524287, LL), (524288, 11534336, SIMPLE), (14680065, 16777216, SIMPLE))
MSCCL_ALLPAIRS_RANKS = 8
#: PAT ("Parallel Aggregated Trees", NCCL 2.23.4: "variation of Bruck algorithm", "Logarithmic number of network
#: steps for small sizes at scale", "Only supports one rank per node"; release commit 68b5423 of NVIDIA/nccl). Its
#: terms in src/graph/tuning.cc (NVIDIA/nccl master 5067397): baseLatencies[PAT] 8.0 µs, then log2i(nNodes) steps
#: of the network latency / 3.5 and a still linear 2.8 µs per rank; busBw x 0.75 (0.85 in 2.23.4; 2.24.3 "Adjust
#: PAT tuning: Improve transition between PAT and ring at scale"), used as algBw unconverted (tuning.cc converts
#: bus to algorithm bandwidth only for the ring among all-gather / reduce-scatter algorithms).
PAT_BASE_LAT_US = 8.0
PAT_LOG_STEP_DIVISOR = 3.5
PAT_PER_RANK_US = 2.8
PAT_BUS_SHARE = 0.75
#: NCCL_MAX_NVLS_ARITY (src/include/device.h): NVLS has at most 32 heads, each with its NIC (src/graph/search.cc:
#: "NVLS and COLLNET_DIRECT search must have ngpus heads at most").
NVLS_MAX_HEADS = 32
#: The share of a NIC's line rate a stream across nodes gets: "We usually consider 24GB/s is the peak performance
#: per 200G NIC (12 GB/s for 100G NICs)" (S. Jeaugey, NVIDIA, NVIDIA/nccl-tests#119, 2022-11-17): 24 / 25
#: (defined in scale_out.py as NIC_ACHIEVABLE).
NIC_EFFICIENCY = NIC_ACHIEVABLE
#: llMaxBws across nodes is indexed by the CPU, not the GPU: row 0 Intel, row 1 AMD (dossier §4.1).
LL_MAX_MULTINODE = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
#: NCCL's netOverhead (µs) per CPU vendor, ×3 for Simple.
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}
#: The network plugin's own latency (µs) NCCL adds to hwLatencies[NET] across nodes (``graph->latencyInter``, the
#: net device's ``props.latency``), twice for Simple ("the flush extra latency"): src/graph/tuning.cc ``interLat +=
#: graphs[a]->latencyInter; if (p == NCCL_PROTO_SIMPLE) interLat += graphs[a]->latencyInter;`` (NVIDIA/nccl
#: v2.18.1-1 through master 5067397; in 2.13-2.17 a non-zero plugin latency replaced hwLatencies instead).
#: NCCL's InfiniBand/RoCE transport reports 0 ("props->latency = 0; // Not set", src/transport/net_ib.cc v2.26.2-1,
#: net_ib/init.cc at 5067397), and so does its socket transport: Simple's network step costs hwLatencies[NET] once,
#: not twice.
NET_PLUGIN_LATENCY_US = 0.0


def net_inter_lat(proto, plugin_us=None):
    """What NCCL adds to a network step's hwLatencies[NET] for ``proto``: the plugin's latency (``plugin_us``; None:
    :data:`NET_PLUGIN_LATENCY_US`, NCCL's own transports), twice for Simple."""
    return (NET_PLUGIN_LATENCY_US if plugin_us is None else plugin_us) * (2 if proto == SIMPLE else 1)


#: treeCorrectionFactor[proto][log2(nBytes/64)] (master's 24 entries). The tree reads indices 0-22, 64 B to
#: 512 MiB exclusive: ``algorithm == NCCL_ALGO_TREE && ... logSize < 23`` in ncclTopoGetAlgoTime (src/graph/tuning.cc,
#: NVIDIA/nccl v2.26.2-1 line 538, master 5067397 line 640, and every tag read from v2.18.1-1 to v2.29.7-1; the table
#: had 23 entries until v2.28.9-1). Index 23 is read only by NVLSTree on Blackwell with an x86 CPU (``logSize < 24``,
#: from v2.29.2-1), which the model does not apply.
TREE_CORRECTION_SIZES = 23
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
#: NCCL's PCIe x16 bandwidth (PCI_BW 12 GB/s is Gen3 x16; Gen4 doubles it, Gen5 again).
PCI_GEN4_BW = 24.0
PCI_GEN5_BW = 48.0
#: NVLink bridge of the PCIe cards (A100 PCIe, H100 NVL): 600 GB/s both directions -> 300 per direction.
BRIDGE_NVLINK_GBPS = 300.0


@dataclass
class NcclConfig:
    """What the model needs about the machine. ``topology``: ``"nvswitch"`` (every GPU on the
    switch, DGX/HGX) or ``"pairwise"`` (NVLink pairs joined by PCIe: ranks 2k, 2k+1 share a link).
    ``calibration``: ``None`` for the fitted one of ``arch``, or an :class:`NcclCalibration`;
    ``calibrated=False`` gives NCCL's own uncorrected times."""

    arch: str = "hopper"
    nvlink_gbps: float = 450.0  # per direction, per GPU (gpu_model preset: ports x per-port)
    channels: int = 16
    topology: str = "nvswitch"
    nvls: bool = True
    pci_gbps: float = PCI_GEN4_BW
    pair_nvlink_gbps: float = BRIDGE_NVLINK_GBPS
    calibrated: bool = True
    calibration: NcclCalibration | None = None
    #: Across nodes: NIC bandwidth per GPU (GB/s per direction; one NIC per GPU, rail-optimised) and the
    #: CPU vendor (NCCL's netOverhead and multi-node llMaxBw depend on it).
    nic_gbps: float = 50.0
    cpu: str = "intel"
    #: The scale-out switches reduce (InfiniBand SHARP): NCCL may choose CollNet for all-reduce across nodes.
    sharp: bool = False
    #: RCCL's MSCCL all-pairs all-reduce on one 8-GPU node (AMD Instinct: :data:`MSCCL_ALLPAIRS_WINDOWS`).
    msccl_allpairs: bool = False
    #: NCCL >= 2.23 with NCCL_PAT_ENABLE at its default: PAT is a candidate for all-gather and reduce-scatter at one
    #: rank per node. False: an older NCCL, NCCL_PAT_ENABLE=0, or RCCL (its PAT_ENABLE defaults to 0, ROCm/rccl#1756).
    pat: bool = True
    #: Whose tuning model picks the pair across nodes (``--nccl-version``, :mod:`astra_gpu_model.nccl_tuning`); the
    #: picked pair is timed with master's terms either way.
    tuning: str = nccl_tuning.MASTER
    #: The network plugin's reported latency (µs, NCCL's ``graph->latencyInter``), where a plugin other than NCCL's own
    #: IB/RoCE/socket transports reports one (``--scale-out efa``: aws-ofi-nccl's 75 µs on p5). None: those transports'
    #: :data:`NET_PLUGIN_LATENCY_US`. It enters NCCL's *choice* only (:func:`_chosen`): the plugin states it to steer
    #: NCCL's tuner, not as a measured latency.
    net_latency_us: float | None = None
    #: NCCL_ALGO and NCCL_PROTO as the run sets them (``--nccl-algo``, ``--nccl-proto``; NCCL's syntax): the pairs
    #: NCCL's choice may pick (:func:`enabled_pairs`); None: every one.
    algo_env: str | None = None
    proto_env: str | None = None
    #: The pattern of NCCL's tree graph across nodes (:func:`astra_gpu_model.nccl_graph.tree_pattern`): ``"tree"``
    #: (each NIC's PCIe switch holds one GPU, the 8-rail HGX layout) or ``"balanced"`` (a second GPU reaches each NIC
    #: at the same PCIe distance); None: derived from the architecture and the node.
    tree_pattern: str | None = None

    def link(self, n, nodes=1):
        """The path a ring of ``n`` ranks on ``nodes`` nodes is bounded by."""
        if nodes > 1:
            return "net"
        if self.topology == "nvswitch":
            return "nvswitch"
        return "bridge" if n <= 2 else "pcie"

    def correction(self):
        if not self.calibrated:
            return None
        return self.calibration or load_calibration()[CALIBRATION_ARCH[self.arch]]


def config_for_gpu(name=None, **overrides):
    """An :class:`NcclConfig` from a gpu_model preset name or YAML (default H100)."""
    from astra_gpu_model.gpu import load_gpu

    gpu = load_gpu(name)
    text = f"{gpu.name} {gpu.raw.get('architecture', '')}".lower()
    arch = next((a for a in ("blackwell", "hopper", "ampere", "volta") if a in text), None)
    if arch is None and "cdna" in text:
        arch = "cdna3"  # AMD Instinct: RCCL, calibrated on MI300X (CDNA 4's MI355X: ASSUMPTION, the same)
    if arch is None:
        arch = "hopper" if any(k in text for k in ("h100", "h200")) else "ampere"
    bw = gpu.scaleup_bandwidth_gbps or 450.0
    kw = dict(arch=arch, nvlink_gbps=bw, channels=16 if arch in ("hopper", "blackwell") else 12,
              pci_gbps=PCI_GEN5_BW if arch in ("hopper", "blackwell") else PCI_GEN4_BW)
    if gpu.vendor.lower() == "amd":  # RCCL: its MSCCL all-pairs all-reduce on the 8-GPU Infinity Fabric mesh
        kw.update(msccl_allpairs=True, pat=False)
    if gpu.scaleup_topology == "pairwise":  # PCIe cards: NVLink bridges join pairs, PCIe the rest (no NVLS)
        kw.update(topology="pairwise", pair_nvlink_gbps=bw, nvls=False)
    kw.update(overrides)
    return NcclConfig(**kw)


def _nsteps(coll, n):
    """The ring's steps, ``n / nsteps`` its bus-to-algorithm bandwidth. An all-to-all moves ``(n - 1) / n`` of its
    buffer over the links: its part for itself is a local copy (:data:`P2P_LL_THRESHOLD`), so ``n - 1`` too."""
    if coll == ALL_REDUCE:
        return 2 * (n - 1)
    if coll in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return n - 1
    return n


def predict(coll, n_bytes, n, cfg: NcclConfig, nodes=1):
    """NCCL's own model: all (algo, proto) candidates as ``(time_us, algo, proto, lat_us, bw_us)``,
    fastest first (``time_us = lat_us + bw_us``). ``n_bytes`` is NCCL's nBytes: the per-rank buffer
    (all-gather: the output size). ``nodes``: the ``n`` ranks sit on that many nodes, ``n / nodes`` each.
    NCCL's tuning has no all-to-all: its ring here stands for one node's; across nodes
    :func:`collective_time_us` times an all-to-all with :func:`alltoall_across_nodes_us` instead."""
    if n <= 1:
        return [(0.0, RING, SIMPLE, 0.0, 0.0)]
    if nodes < 1 or nodes > n:
        raise ValueError(f"nccl: {n} ranks cannot sit on {nodes} nodes")
    caps = nccl_tuning.caps(ARCH[cfg.arch], cfg.arch, cfg.tuning, nodes)
    col = 0 if nodes == 1 else (1 if nodes == 2 else 2)
    ppn = -(-n // nodes)  # ranks per node (the fullest node when they are uneven)
    nch = cfg.channels
    link = cfg.link(n if nodes == 1 else ppn)
    bw_intra = intra_bandwidth(cfg, link, caps)
    hw = HW_LAT["pci" if link == "pcie" else "nvlink"]
    ring_bw_bus = None
    if nodes > 1:
        # The ring/tree crosses its node's NICs: one per GPU, rail-optimised.
        bw_inter = cfg.nic_gbps * ppn
        bw_bus = bw_inter if ppn == 1 else min(bw_intra, bw_inter)
        if link == "nvswitch":  # NCCL's perChMax...Bw caps count its search's channels (nccl_graph.ring_graph: 8 on
            # 8 H100 with 8 NICs, one per NIC at the first speed the path allows), not the communicator's 16.
            nch, speed = ring_graph(cfg.arch, ppn, cfg.nic_gbps, cfg.pci_gbps, bw_intra,
                                    nccl_tuning.speed_array(cfg.arch, cfg.tuning))
            if cfg.tuning != nccl_tuning.MASTER:  # a release's pick ranks its ring by NCCL's own busBw (8 x 48)
                ring_bw_bus = ring_bus(nch, speed)
        ll_max = LL_MAX_MULTINODE[cfg.cpu][col - 1]
        net_overhead = NET_OVERHEAD_US[cfg.cpu]
    else:
        bw_bus = bw_intra
        ll_max = caps["ll_max"][0]
    nsteps = _nsteps(coll, n)
    n_inter = 0 if nodes == 1 else (2 * (nodes - 1) if coll == ALL_REDUCE else nodes - 1)
    out = []
    for algo in ALGORITHMS:
        if algo == TREE and coll != ALL_REDUCE:
            continue
        if algo == COLLNET:
            if cfg.sharp and nodes > 1 and coll == ALL_REDUCE and link == "nvswitch":
                alg_bw = collnet_bw(cfg, ppn, bw_intra)
                lat = BASE_LAT[RING][2] + 2 * (ppn - 1) * hw[RING][2] + COLLNET_NET_LAT_US
                bw_us = n_bytes / (1000.0 * alg_bw)
                out.append((lat + bw_us, COLLNET, SIMPLE, lat, bw_us))
            continue
        if algo == NVLS_TREE:
            if (cfg.arch in NVLS_TREE_ARCHS and cfg.nvls and nodes > 1 and ppn > 1 and coll == ALL_REDUCE
                    and link == "nvswitch"):
                # tuning.cc: intraLat + 2 log2i(nNodes) x interLat, whose plugin latency counts twice (Simple)
                plugin = net_inter_lat(SIMPLE, cfg.net_latency_us)
                alg_bw = nvls_tree_bus(cfg, bw_intra, ppn, nodes) * n / nsteps
                lat = hw[NVLS_TREE][2] + 2 * math.log2(nodes) * (HW_LAT["net"][NVLS_TREE][2] + plugin)
                if cfg.tuning != nccl_tuning.MASTER:
                    lat, alg_bw = nccl_tuning.nvls_tree_terms(cfg.arch, ppn, nodes, cfg.nic_gbps, cfg.pci_gbps,
                                                              bw_intra, plugin)
                bw_us = n_bytes / (1000.0 * alg_bw)
                out.append((lat + bw_us, NVLS_TREE, SIMPLE, lat, bw_us))
            continue
        if algo == PAT:
            if cfg.pat and nodes == n and coll in (ALL_GATHER, REDUCE_SCATTER):
                lat, alg_bw = pat_terms(n, bw_bus, cfg.net_latency_us)
                bw_us = n_bytes / (1000.0 * alg_bw)
                out.append((lat + bw_us, PAT, SIMPLE, lat, bw_us))
            continue
        if algo == NVLS and (not cfg.nvls or caps["nvls_eff"] == 0 or link != "nvswitch" or nodes > 1
                             or coll not in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)):
            continue
        for p, proto in enumerate(PROTOCOLS):
            intra = hw[algo][p]
            if intra is None:
                continue
            if algo == NVLS and proto != SIMPLE:
                continue
            bus = ring_bw_bus if algo == RING and ring_bw_bus else bw_bus
            if algo == RING and proto == LL:
                bus = min(ll_max, 0.5 * bus)
            elif algo == RING and proto == LL128:
                bus = min(0.92 * bus, nch * caps["ring_ll128"][col])
            elif algo == TREE:
                # tuning.cc: the 0.92 and perChMaxTreeBw cap hold for every protocol of an all-reduce tree, then LL
                # and LL128 their own; x0.85 where the tree graph's pattern is NCCL_TOPO_PATTERN_TREE (tree_pattern)
                bus = min(0.92 * bw_bus, nch * caps["tree"][col])
                if proto == LL:
                    bus = min(bus / 3.8, ll_max)
                elif proto == LL128:
                    bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), nch * caps["tree_ll128"][col])
                if tree_pattern(cfg.arch, ppn, nodes, link, cfg.tree_pattern) == TREE_PATTERN_TREE:
                    bus *= TREE_PATTERN_SHARE
            elif algo == NVLS:
                bus = bw_intra * caps["nvls_eff"] * (nch - 1) / nch
                bus *= 2 if coll == ALL_REDUCE else (n - 1) / n
                bus = min(bus, bw_intra * 2)
            alg_bw = bus * n / nsteps if algo in (RING, NVLS) else bus * 0.5
            if algo == RING:
                lat = BASE_LAT[RING][p] + nsteps * intra
                if nodes > 1:
                    inter = HW_LAT["net"][TREE if ppn == 1 else RING][p] + net_inter_lat(proto, cfg.net_latency_us)
                    overhead = net_overhead * (3 if proto == SIMPLE else 1)
                    lat = BASE_LAT[RING][p] + (nsteps - n_inter) * max(intra, overhead) + n_inter * inter
                    if proto == SIMPLE and coll == ALL_REDUCE and n_bytes / (nch * n) >= 64:
                        lat *= 1.9 if cfg.arch == "volta" else 1.4
            elif algo == TREE:
                lat = BASE_LAT[TREE][p] + 2 * (ppn - 1) * intra
                if nodes > 1:
                    lat += 2 * math.log2(nodes) * (HW_LAT["net"][TREE][p] + net_inter_lat(proto, cfg.net_latency_us))
            else:
                lat = intra
            if algo == TREE:  # NCCL's log2i(nBytes >> 6) (log2Down: -1 for 0), below TREE_CORRECTION_SIZES
                log_size = (int(n_bytes) >> 6).bit_length() - 1
                if 0 <= log_size < TREE_CORRECTION_SIZES:
                    alg_bw *= TREE_CORRECTION[p][log_size]
            bw_us = n_bytes / (1000.0 * alg_bw)
            out.append((lat + bw_us, algo, proto, lat, bw_us))
    out.sort()
    if coll == ALL_TO_ALL:  # NCCL's sends and receives run LL or Simple, never LL128 (:data:`P2P_PROTOCOLS`)
        out = [c for c in out if c[2] in P2P_PROTOCOLS] or out
    if (cfg.algo_env or cfg.proto_env) and coll in _ENV_FUNC:
        out = _enabled(out, coll, cfg)
    window = _allpairs_protocol(coll, n_bytes, n, cfg, nodes)
    if window is not None:
        # MSCCL replaces RCCL's choice in its windows: the ring's bandwidth of that protocol (the same bytes per
        # link: each GPU sends 2 (n-1)/n of the buffer over its n-1 links), two steps of latency instead of 2 (n-1).
        ring = next(c for c in out if c[1] == RING and c[2] == window)
        p = PROTOCOLS.index(window)
        lat = BASE_LAT[RING][p] + 2 * hw[RING][p]
        return [(lat + ring[4], MSCCL_ALLPAIRS, window, lat, ring[4])]
    return out


#: the model's collectives and algorithms by NCCL's names (nccl_tuning.ENV_FUNCS / ENV_ALGOS); CollNet is NCCL's
#: CollNetDirect or CollNetChain (the model has one CollNet).
_ENV_FUNC = {ALL_REDUCE: "AllReduce", ALL_GATHER: "AllGather", REDUCE_SCATTER: "ReduceScatter"}
_ENV_ALGO = {TREE: ("Tree",), RING: ("Ring",), COLLNET: ("CollNetDirect", "CollNetChain"), NVLS: ("NVLS",),
             NVLS_TREE: ("NVLSTree",), PAT: ("PAT",)}


def _enabled(cands, coll, cfg: NcclConfig):
    """The candidates NCCL_ALGO / NCCL_PROTO leave (tuning.cc v2.26.2-1 l. 364-374: algoEnable, protoEnable); none
    left is NCCL's "no algorithm/protocol available" error (enqueue.cc topoGetAlgoInfo): a ConfigError."""
    func = _ENV_FUNC[coll]
    algos = nccl_tuning.parse_enable_list(cfg.algo_env or ",".join(nccl_tuning.ENV_ALGOS), nccl_tuning.ENV_ALGOS,
                                          "--nccl-algo")[func]
    protos = nccl_tuning.parse_enable_list(cfg.proto_env or ",".join(nccl_tuning.ENV_PROTOS), nccl_tuning.ENV_PROTOS,
                                           "--nccl-proto")[func]
    left = [c for c in cands if c[2] in protos and set(_ENV_ALGO[c[1]]) & algos]
    if not left:
        from astra_sim.errors import ConfigError

        raise ConfigError(f"NCCL has no algorithm/protocol for {func} with --nccl-algo {cfg.algo_env!r} "
                          f"--nccl-proto {cfg.proto_env!r} (candidates: "
                          f"{', '.join(f'{a}/{p}' for _, a, p, _, _ in cands)})")
    return left


def _allpairs_protocol(coll, n_bytes, n, cfg, nodes):
    """The protocol of RCCL's MSCCL all-pairs all-reduce at this size, or None where RCCL's own choice runs."""
    if not (cfg.msccl_allpairs and coll == ALL_REDUCE and nodes == 1 and n == MSCCL_ALLPAIRS_RANKS):
        return None
    return next((proto for low, high, proto in MSCCL_ALLPAIRS_WINDOWS if low <= n_bytes <= high), None)


def pat_terms(n, bw_bus, plugin_us=None):
    """``(lat_us, alg_bw)`` of NCCL's PAT all-gather / reduce-scatter over ``n`` nodes of one rank each (Simple only):
    log2(n) network steps, which is why it beats the ring's n - 1 steps at scale for small sizes, but at 0.75 of the
    bus bandwidth, so the ring wins again past a size that grows with ``n``. The network latency is the one the ring
    pays per step at one rank per node (the tree's net Simple latency, plus the plugin's: :func:`net_inter_lat`)."""
    inter = HW_LAT["net"][TREE][2] + net_inter_lat(SIMPLE, plugin_us)
    lat = PAT_BASE_LAT_US + (int(n).bit_length() - 1) * inter / PAT_LOG_STEP_DIVISOR + n * PAT_PER_RANK_US
    return lat, bw_bus * PAT_BUS_SHARE


#: NCCL's all-to-all is not a ring: it is one send/receive pair per peer (``ncclFuncAlltoAll`` falls back to
#: "legacy sendrecv", src/enqueue.cc; nccl-tests' alltoall_perf posts ncclSend/ncclRecv to every peer in one group),
#: scheduled in rounds of peer deltas that interleave the nodes (``p2pSchedule``, src/init.cc; NVIDIA/nccl at
#: 5067397). Its choice label here; NCCL's tuning model has no all-to-all term of its own.
P2P = "p2p"
#: The protocols of NCCL's sends and receives, so of its all-to-all: ``addP2pToPlan`` (src/enqueue.cc, NVIDIA/nccl
#: 5067397) sets ``protocol = protoLL ? NCCL_PROTO_LL : NCCL_PROTO_SIMPLE``, never LL128. NCCL takes LL when a send's
#: bytes are at most NCCL_P2P_LL_THRESHOLD (16 KiB; v2.14.3-1 to v2.18.6-1) or its channels x 16 KiB (master), which
#: on one node is LL up to 16 KiB a peer (:data:`P2P_LL_THRESHOLD`). The model keeps the faster of the two by its own
#: terms instead: the ring's latency it times them with (n - 1 hops, 36.5 µs calibrated for Simple on 8 H100) is
#: not a latency of concurrent sends, and no measured one-node all-to-all table was found to size one.
P2P_PROTOCOLS = (LL, SIMPLE)
#: NCCL_P2P_LL_THRESHOLD's default (bytes; src/enqueue.cc ``NCCL_PARAM(P2pLLThreshold, "P2P_LL_THRESHOLD", 16384)``
#: from v2.14.3-1 to 5067397). A rank's part for itself (``selfSend`` in ``addP2pToPlan``) has no connection and no
#: proxy operation: a copy inside the GPU, so an all-to-all moves (n - 1) / n of its buffer over NVLink
#: (:func:`_nsteps`), as nccl-tests counts it: busBw = algBw x (n - 1) / n, "since 1/n of the data is local"
#: (S. Jeaugey, NVIDIA/nccl-tests#130).
P2P_LL_THRESHOLD = 16384
# On Blackwell the one-node all-to-all (the ring stand-in above) takes NCCL's own Blackwell constants, its link
# (40.1 GB/s x 18 = 721.8 GB/s on B200) and LL cap (llMaxBws 2 x 141.0, src/graph/tuning.cc v2.27.7-1), but
# Hopper's calibration (:data:`~astra_gpu_model.nccl_calibration.BORROWED_FIT`: the factors fitted on H100 rings up to
# 64 MB, nvswitch/ring/Simple 0.716 and LL 0.536, the 2.32 us overhead and the 1.06 latency scale, for every size:
# Blackwell's own factors past 64 MB are NVLS's only). No source gives a Blackwell value: NCCL's tuning model has no
# all-to-all or send/receive term (it tunes the collectives; ``addP2pToPlan`` picks LL or Simple
# by size alone; tuning.cc names no all-to-all, send or receive at v2.23.4-1 or v2.27.7-1), and no published
# all-to-all sweep of 8 B200 / GB200 was found (searched in session 50: nccl-tests issues, web pages and blogs;
# coreweave/nccl-tests' README at cb86553 shows all-reduce only). So the borrowed factor stays:
# 8 B200 move 256 MiB in 491 us (busBw 478 GB/s), 8 H100 in 734 us.


def alltoall_across_nodes_us(n_bytes, n, cfg: NcclConfig, nodes):
    """``(on_node_us, off_node_us)`` of an all-to-all of ``n_bytes`` per rank over ``n`` ranks on ``nodes`` nodes.
    The slower part sets its time: both run at once, over their own paths.

    Each GPU sends ``n_bytes / n`` to every peer. Off its node it sends ``(n - its node's ranks) / n`` of its buffer
    through *its own* NIC (one per GPU, rail-optimised): an all-to-all "cannot aggregate the bandwidth of multiple
    NICs, so the performance you should see is the performance of a single NIC" (S. Jeaugey, NVIDIA,
    NVIDIA/nccl-tests#267, 2024-11-19); "the portion that's going through the network will determine the global
    time ... On 2 nodes, 50% of the traffic is inter-node so you should see BusBW = 2x network bandwidth per GPU"
    (S. Jeaugey, NVIDIA/nccl-tests#130, 2023-02-03). The NIC runs at its achievable share
    (:data:`NIC_EFFICIENCY`; "CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC", A. Laddy,
    NVIDIA, nccl-tests#267), plus one network step's latency (NCCL's hwLat net ring Simple; ASSUMPTION: the sends
    to every off-node peer are in flight together, so the latency is paid once, not per peer).
    On its node it sends the node's share, ``ranks per node / n`` of its buffer, to its node's ranks: the one-node
    all-to-all of that share, timed as before (calibrated like the other one-node collectives)."""
    ppn = -(-n // nodes)  # the fullest node: its GPUs have the most on-node traffic
    least = n // nodes  # the emptiest node: its GPUs send the most off-node
    share = n_bytes * ppn // n
    on_node = collective_time_us(ALL_TO_ALL, share, ppn, cfg, 1)[0] if ppn > 1 else 0.0
    cal = cfg.correction()
    overhead = cal.overhead_us if cal is not None else 0.0
    off_bytes = n_bytes * (n - least) / n
    off_node = overhead + HW_LAT["net"][RING][2] + off_bytes / (1000.0 * cfg.nic_gbps * NIC_EFFICIENCY)
    return on_node, off_node


def intra_bandwidth(cfg: NcclConfig, link, caps=None):
    """NCCL's bwIntra (GB/s per GPU): its per-link constant times the links (the per-direction bandwidth over the
    datasheet's link rate), or NCCL's PCI_BW per generation. ``caps``: another release's constants (its ``link``)."""
    if link == "pcie":
        return cfg.pci_gbps
    caps = ARCH[cfg.arch] if caps is None else caps
    nvlink = cfg.pair_nvlink_gbps if link == "bridge" else cfg.nvlink_gbps
    return nvlink * caps["link"] / caps["link_rate"]


def nvls_tree_bus(cfg: NcclConfig, bw_intra, ppn, nodes, nvls_share=None, nic_share=1.0):
    """Bus bandwidth (GB/s) of NCCL's NVLSTree all-reduce: NVLS reduces inside each node, the node's heads (one GPU
    and its NIC each, at most :data:`NVLS_MAX_HEADS`) run a tree between nodes. NCCL's model (tuning.cc): the least
    of NVLS's bus bandwidth, the heads' NICs (twice on 2 nodes, where the tree is one exchange each way; once on
    more, where a tree node forwards to two children), and ``channels x perChMaxNVLSTreeBw``, ``channels`` being the
    NVLS graph's: one per head (search.cc: "NVLS and COLLNET_DIRECT search must have ngpus heads at most",
    ``maxChannels = min(NCCL_MAX_NVLS_ARITY, ngpus)``), not the communicator's NVLS CTAs (8 H100: 8 x 45.5 = 364 GB/s
    on more than 2 nodes, 8 x 57.7 = 461.6 on 2; measured 365 and 468, NVIDIA/nccl-tests#309).

    ``nvls_share``: the factor on NCCL's NVLS bandwidth the calibration found (its peak statement), ``nic_share``:
    on the NICs' line rate (:data:`NIC_EFFICIENCY`); both 1 for NCCL's own model."""
    caps = ARCH[cfg.arch]
    intra = min(bw_intra * caps["nvls_eff"] * (cfg.channels - 1) / cfg.channels * 2, bw_intra * 2)
    intra *= 1.0 if nvls_share is None else nvls_share
    inter = min(ppn, NVLS_MAX_HEADS) * cfg.nic_gbps * nic_share * (2 if nodes <= 2 else 1)
    return min(intra, inter, min(ppn, NVLS_MAX_HEADS) * caps["nvls_tree"][1 if nodes <= 2 else 2])


def collnet_bw(cfg: NcclConfig, ppn, bw_intra):
    """Algorithm bandwidth (GB/s) of a SHARP all-reduce across nodes, ``ppn`` GPUs per node.

    Inside a node the GPUs pass each channel's data along a chain to the NIC and the result back down
    (NCCL's CollNet chain), so a GPU's NVLink carries about twice the all-reduce's bytes: ``bw_intra / 2``.
    With NVLink SHARP (NVLS on Hopper and later) the node reduces in its NVSwitch instead, at NVLS's own
    all-reduce bandwidth. Across nodes the switches reduce: each NIC carries the node's share of the bytes
    once each way, ``ppn x nic x`` :data:`COLLNET_NIC_EFFICIENCY`. The slower of the two bounds it.
    """
    caps = ARCH[cfg.arch]
    intra = bw_intra / 2.0
    if cfg.nvls and caps["nvls_eff"] > 0 and ppn > 1:
        nvls_bus = min(bw_intra * caps["nvls_eff"] * (cfg.channels - 1) / cfg.channels * 2, bw_intra * 2)
        intra = max(intra, nvls_bus * ppn / (2 * (ppn - 1)))
    elif ppn == 1:
        intra = float("inf")
    return min(intra, ppn * cfg.nic_gbps * COLLNET_NIC_EFFICIENCY)


#: Algorithms whose bandwidth NCCL's model takes as channels x a channel's bandwidth (tuning.cc ``busBw =
#: graphs[a]->nChannels * bw``, and ``nChannels x perChMax...Bw`` caps) and which run on the communicator's
#: ``nChannels`` CTAs, the count ``maxCTAs`` / NCCL_MAX_CTAS / NCCL_MAX_NCHANNELS cap (src/graph/connect.cc
#: ncclTopoPostset: ``comm->nChannels = min(ncclMaxNchannels(), nChannels, comm->config.maxCTAs)``, NVIDIA/nccl
#: v2.18.3-1 line 416, v2.27.7-1 line 483). NVLS and NVLS_TREE are left out: their graph's channels are the NVLS
#: heads, and the NVLS CTAs (``nvlsChannels``, src/transport/nvls.cc) enter no bandwidth term of NCCL's model.
#: All-to-all is send/receive, whose CTAs maxCTAs does not cap (NVIDIA/nccl#2421, #1598).
CTA_SCALED = (RING, TREE, COLLNET, PAT)


def cta_share(algo, cfg: NcclConfig, ctas):
    """The share of its bandwidth a collective of ``algo`` keeps on a communicator capped at ``ctas`` CTAs: NCCL's
    own rule for a collective on fewer channels than its tuning assumed, ``bw = bw / comm->nChannels *
    info->nChannels`` (src/graph/tuning.cc ncclTopoGetAlgoTime, NVIDIA/nccl v2.18.3-1 line 389), with
    ``min(channels, ctas)`` of the model's ``channels``: one channel runs on one CTA. 1.0 without a cap (None or
    0: 0 SMs is a copy-engine transfer, which no CTA count limits)."""
    if not ctas or ctas >= cfg.channels or algo not in CTA_SCALED:
        return 1.0
    return ctas / cfg.channels


def collective_time_us(coll, n_bytes, n, cfg: NcclConfig, nodes=1, ctas=None):
    """``(time_us, algo, proto)``: the pair NCCL picks, timed with the measured-time calibration.

    ``ctas``: the communicator's CTA cap (the trace node's ``comm_sms``; None: NCCL's default channels). NCCL picks
    the pair from bandwidths computed once, at init, from the search's uncapped channels (ncclTopoTuneModel reads
    ``graphs[a]->nChannels``, which maxCTAs does not change), so the choice is the same; the chosen pair then runs
    on ``min(channels, ctas)`` CTAs, and its bandwidth term is divided by :func:`cta_share`."""
    if coll == ALL_TO_ALL and nodes > 1 and n > 1:
        return max(alltoall_across_nodes_us(n_bytes, n, cfg, nodes)), P2P, SIMPLE
    _, algo, proto, lat, bw_us = _chosen(coll, n_bytes, n, cfg, nodes)
    if n <= 1:
        return 0.0, algo, proto
    if coll != ALL_TO_ALL:
        bw_us /= cta_share(algo, cfg, ctas)
    if nodes > 1 and coll != ALL_TO_ALL:  # NCCL's channels by size, as cta_share scales them (one node: in the fit)
        start = min(cfg.channels, ctas) if ctas else cfg.channels
        bw_us *= start / size_channels(algo, proto, n_bytes, n, start)
    cal = cfg.correction()
    if cal is None:
        return lat + bw_us, algo, proto
    if algo == NVLS_TREE:
        # Each part at its own calibrated rate: NVLS as on one node (its fitted factor up to the fitted sizes, its
        # peak statement's past them), the NICs at NCCL's share of their line rate.
        ppn, bw_intra = -(-n // nodes), intra_bandwidth(cfg, "nvswitch")
        fitted = cal.efficiency_for("nvswitch", NVLS, SIMPLE)
        peak = cal.beyond_fit.get("nvswitch/nvls/Simple", fitted)
        to_alg = n / _nsteps(coll, n) * 1000.0
        head = min(n_bytes, cal.fitted_max_bytes or n_bytes)
        bw_us = (head / (to_alg * nvls_tree_bus(cfg, bw_intra, ppn, nodes, fitted, NIC_EFFICIENCY))
                 + (n_bytes - head) / (to_alg * nvls_tree_bus(cfg, bw_intra, ppn, nodes, peak, NIC_EFFICIENCY)))
        return cal.overhead_us + cal.latency_scale * lat + bw_us, algo, proto
    link = cfg.link(n, nodes)
    eff = cal.efficiency_for(link, algo, proto)
    beyond = cal.beyond_fit.get(f"{link}/{algo}/{proto}")
    if beyond is not None and n_bytes > cal.fitted_max_bytes:
        # bw_us is linear in the size: the fitted range at the fitted factor, the rest at the peak's.
        fitted_part = bw_us * cal.fitted_max_bytes / n_bytes
        return (cal.overhead_us + cal.latency_scale * lat + fitted_part / eff + (bw_us - fitted_part) / beyond,
                algo, proto)
    return cal.overhead_us + cal.latency_scale * lat + bw_us / eff, algo, proto


def _chosen(coll, n_bytes, n, cfg: NcclConfig, nodes):
    """The candidate NCCL runs: the pair ``cfg.tuning``'s model picks (with the plugin's latency, ``net_latency_us``),
    with master's latency and bandwidth terms and NCCL's own transports' plugin latency (a plugin's figure is a
    tuning input: aws-ofi-nccl sets 75 µs on p5 because "NCCL's internal tuner choices work better with this value",
    src/platform-aws.cpp at 2daf7d30)."""
    pick = predict(coll, n_bytes, n, cfg, nodes)[0]
    if (cfg.tuning == nccl_tuning.MASTER and cfg.net_latency_us is None) or n <= 1:
        return pick
    master = predict(coll, n_bytes, n, replace(cfg, tuning=nccl_tuning.MASTER, net_latency_us=None), nodes)
    return next(c for c in master if c[1:3] == pick[1:3])


def latency_us(coll, n_bytes, n, cfg: NcclConfig, nodes=1):
    """The latency part of :func:`collective_time_us` (the rest is its bandwidth part): the chosen pair's latency,
    calibrated as there (overhead + scale x NCCL's latency). An all-to-all across nodes counts none (all of it taken
    as bandwidth)."""
    if n <= 1 or (coll == ALL_TO_ALL and nodes > 1):
        return 0.0
    lat = _chosen(coll, n_bytes, n, cfg, nodes)[3]
    cal = cfg.correction()
    return lat if cal is None else cal.overhead_us + cal.latency_scale * lat


class NcclCollective(TimedCollective):
    """Waits the NCCL model's time for its chunk, then finishes: no packets."""

    __slots__ = ("config", "choice")

    def __init__(self, com_type, rank, topo, data_size, config=None):
        super().__init__(com_type, rank, topo, data_size)
        self.config = config
        self.choice = None

    def bind(self, stream):
        super().bind(stream)
        if self.config is None:
            self.config = config_for_options(self.options)

    def duration_ns(self):
        # NCCL's nBytes: the per-rank buffer (all-gather counts the gathered output).
        n_bytes = self.final_data_size if self.com_type == ALL_GATHER else self.data_size
        n = self.nodes_in_ring
        nodes = self._nodes_spanned()
        ctas = self._cta_cap()
        # A run asks for a handful of distinct collectives many times (every chunk of every rank): one model
        # evaluation each. The entry keeps its config alive, so its id is not reused while the entry exists.
        key = (self.com_type, int(n_bytes), n, nodes, id(self.config), ctas)
        hit = _TIME_CACHE.get(key)
        if hit is None or hit[0] is not self.config:
            if len(_TIME_CACHE) >= _TIME_CACHE_MAX:  # bounded across runs (sweeps in one process)
                _TIME_CACHE.clear()
            hit = (self.config, collective_time_us(self.com_type, int(n_bytes), n, self.config, nodes, ctas))
            _TIME_CACHE[key] = hit
        t_us, algo, proto = hit[1]
        self.choice = (algo, proto)
        contention = getattr(self.sys.shared.compute_model, "contention", None)
        until = None if contention is None else contention.compute_busy_until(self.rank)  # (None unless measured)
        if until is None:
            return t_us * 1000.0
        # compute kernels of this rank run now: the bandwidth part is slowed while they do (contention.py)
        total = max(0, int(round(t_us * 1000.0)))
        lat = _LAT_CACHE.get(key)
        if lat is None or lat[0] is not self.config:
            if len(_LAT_CACHE) >= _TIME_CACHE_MAX:
                _LAT_CACHE.clear()
            lat = _LAT_CACHE[key] = (self.config, latency_us(self.com_type, int(n_bytes), n, self.config, nodes))
        latency = int(round(lat[1] * 1000.0))
        return contention.slowed_collective_ns(until, total, total - min(total, latency))

    def _cta_cap(self):
        """The CTA cap of this collective's communicator: its trace node's ``comm_sms`` attribute (``astra workload
        llm --comm-sms``: NCCL_MAX_CTAS / a communicator's ``maxCTAs``), or None where the node has none or the run's
        compute model cannot show the node (only the ``gpu`` model keeps the ranks' nodes)."""
        node_id = getattr(getattr(self.stream, "dataset", None), "node_id", -1)
        lookup = getattr(self.sys.shared.compute_model, "rank_node", None)
        if node_id is None or node_id < 0 or lookup is None:
            return None
        node = lookup(self.rank, node_id)
        if node is None or "comm_sms" not in node.attrs:
            return None
        value = node.attrs["comm_sms"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            from astra_sim.errors import WorkloadError

            raise WorkloadError(f"collective node {node_id} ({node.name!r}) of rank {self.rank}: attribute "
                                f"'comm_sms' must be an integer >= 0 (its communicator's CTAs), got {value!r}")
        return value or None

    def _nodes_spanned(self):
        """Nodes the collective's ranks sit on: a node is one scale-up domain, the network's first
        dimension (``npus_per_dim[0]`` consecutive NPUs)."""
        shared = self.sys.shared
        domain = max(1, int(shared.npus_per_dim[0]))
        n = self.nodes_in_ring
        if n == shared.total_npus:
            return max(1, n // domain)
        members = getattr(self.topo, "members", None)
        if members is None:
            return 1
        cached = _NODES_CACHE.get(id(members))
        if cached is None or cached[0] is not members or cached[1] != domain:
            if len(_NODES_CACHE) >= _NODES_CACHE_MAX:  # bounded across runs (sweeps in one process)
                _NODES_CACHE.clear()
            cached = (members, domain, len({npu // domain for npu in members}))
            _NODES_CACHE[id(members)] = cached
        return cached[2]


#: id(member list) -> (the list, domain size, nodes it spans); group member lists are shared by ranks.
_NODES_CACHE = {}
_NODES_CACHE_MAX = 4096
#: (collective, bytes, ranks, nodes, id(config)) -> (config, collective_time_us's answer); configs are never changed
#: after they are made (dataclasses.replace makes new ones).
_TIME_CACHE = {}
_TIME_CACHE_MAX = 65536
_LAT_CACHE = {}  # the same keys -> (config, latency_us's answer)


_CONFIG_CACHE = {}


def config_for_options(options):
    """The :class:`NcclConfig` a run's collectives use, from its ``gpu`` (default H100), ``nccl_nic_gbps``,
    ``nccl_sharp``, ``nccl_version``, ``nccl_nvls``, ``nccl_algo``, ``nccl_proto``, ``nccl_tree_pattern`` and
    ``nccl_net_latency_us``
    (``--scale-out``'s) options (one object per combination: what else prices a run's
    collectives, e.g. astra search's lower bound, gets the same). ``nccl_nvls`` "off" is NCCL_NVLS_ENABLE=0: no NVLS
    nor NVLSTree (src/transport/nvls.cc v2.26.2-1 leaves nvlsSupport 0; enqueue.cc's cost table then skips both)."""
    name = options.get("gpu")
    nic = options.get("nccl_nic_gbps")
    sharp = bool(options.get("nccl_sharp"))
    tuning = nccl_tuning.tuning_for_version(options.get("nccl_version"))
    nvls_off = options.get("nccl_nvls") == "off"
    plugin = options.get("nccl_net_latency_us")  # a --scale-out kind's plugin latency (scale_out.ScaleOutKind)
    plugin = None if plugin is None or float(plugin) == NET_PLUGIN_LATENCY_US else float(plugin)
    algo_env, proto_env = options.get("nccl_algo"), options.get("nccl_proto")  # NCCL_ALGO, NCCL_PROTO
    pattern = options.get("nccl_tree_pattern")  # the tree graph's pattern across nodes (tree_pattern)
    key = (str(name), nic, sharp, tuning, nvls_off, plugin, algo_env, proto_env, pattern)
    if key not in _CONFIG_CACHE:
        overrides = {} if tuning == nccl_tuning.MASTER else {"tuning": tuning}
        if pattern is not None:
            if pattern not in TREE_PATTERNS:
                from astra_sim.errors import ConfigError

                raise ConfigError(f"nccl_tree_pattern must be one of {', '.join(TREE_PATTERNS)}, "
                                  f"got {pattern!r}")
            overrides["tree_pattern"] = pattern
        for field, text, elems in (("algo_env", algo_env, nccl_tuning.ENV_ALGOS),
                                   ("proto_env", proto_env, nccl_tuning.ENV_PROTOS)):
            if text:
                nccl_tuning.parse_enable_list(text, elems, f"--nccl-{field[:-4]}")  # refused here, not when timed
                overrides[field] = str(text)
        if nvls_off:
            overrides["nvls"] = False
        if plugin is not None:
            if not (math.isfinite(plugin) and plugin >= 0):
                from astra_sim.errors import ConfigError

                raise ConfigError(f"nccl_net_latency_us must be >= 0 us, got {plugin}")
            overrides["net_latency_us"] = plugin
        if nic is not None:
            nic = float(nic)
            if not nic > 0:
                from astra_sim.errors import ConfigError

                raise ConfigError(f"--nccl-nic-gbps must be > 0 (GB/s per GPU per direction), got {nic}")
            overrides["nic_gbps"] = nic
        if sharp:
            overrides["sharp"] = True
        _CONFIG_CACHE[key] = config_for_gpu(name, **overrides)
    return _CONFIG_CACHE[key]


def nccl_factory(com_type, rank, topo, data_size, direction, window):
    return NcclCollective(com_type, rank, topo, data_size)


__all__ = ["NcclConfig", "NcclCalibration", "NcclCollective", "config_for_gpu", "config_for_options", "load_calibration",
           "predict", "intra_bandwidth", "nvls_tree_bus", "NVLS_TREE", "NIC_EFFICIENCY", "PAT", "pat_terms",
           "MSCCL_ALLPAIRS", "MSCCL_ALLPAIRS_WINDOWS", "beyond_fit_efficiency", "calibration_override", "PEAK_BUSBW",
           "PEAK_BUSBW_SOURCES", "PEAK_STATEMENTS", "PeakStatement", "peak_busbw", "collnet_bw",
           "alltoall_across_nodes_us", "P2P", "collective_time_us", "latency_us", "nccl_factory", "ALL_REDUCE",
           "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"]
