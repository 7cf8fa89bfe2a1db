"""NCCL's graph search across nodes, reduced to what its tuning model reads: channels and per-channel bandwidth.

NCCL's tuning (``src/graph/tuning.cc`` ncclTopoTuneModel) does not price a multi-node ring or tree from the node's
NVLink or NIC totals: it takes ``busBw = graphs[a]->nChannels * bw`` with ``bw`` the search's per-channel
bandwidth (``bwIntra`` on <= 2 nodes, ``bwInter`` on more), and caps it at ``graphs[a]->nChannels * perChMax...Bw``.
``graphs[a]->nChannels`` is the *search's* channel count, before the communicator duplicates its channels
(``src/graph/connect.cc`` ncclTopoPostset ``comm->nChannels = min(MAXCHANNELS, nChannels*2)``: the 16 "coll
channels" NCCL logs on 8 H100 with 8 NICs), and ``init.cc`` aligns the tree's to the ring's (``treeGraph->maxChannels
= ringGraph->nChannels``; ``comm->nChannels = treeGraph->nChannels = ringGraph->nChannels = min(...)``).

The search (``src/graph/search.cc`` ncclTopoCompute, NVIDIA/nccl v2.26.2-1 and master 5067397) on a rail-optimised
node (one NIC per GPU, behind the GPU's PCIe switch) comes down to:

* the per-channel speed: the first entry of the architecture's inter-node speed array not above ``system->maxBw``,
  the GPU -> NIC path's bottleneck (the NIC's rate, or the PCIe link's: NCCL's PCI_BW per generation);
* the channels: each NIC (``net.bw -= bw`` per channel it starts) and each GPU's PCIe link carry
  ``floor(rate / speed)`` channels at that speed, up to ``maxChannels`` (``MAXCHANNELS / 2`` = 32 for rings);
* no duplication where ``ncclTopoDupChannels`` returns early: ``bwIntra < 25``, or SM > 80 with ``bwIntra < 50`` and
  more than 4 channels (8 H100 with 8 x 400 Gb/s NICs: 8 channels at 48 GB/s, busBw 384 GB/s);
* a GPU forwards every channel over NVLink but those it sends to its own NIC, which bounds the channels too.

Published NCCL logs show the inputs: an 8-GPU Hopper (H20) node with 400 Gb/s NICs logs "System : maxBw 48.0 totalBw
370.8", "PCI[48.0]" GPU -> NIC and "NET[50.0]" (NVIDIA/nccl#1189), and an 8 H100 node's NVLS graph "Pattern 5 ...
nChannels 7" with one NET per head GPU, one channel per head with a NIC (NVIDIA/nccl#1519).

Used for the channel count (the per-channel caps in :func:`astra_gpu_model.nccl.predict`): the bus bandwidth stays
the NVLink / NIC bound, NCCL's speeds being that bound quantized (48 GB/s per channel for a 50 GB/s NIC; 8 x 48 =
384 against the 370.8 GB/s of NVLink on 8 H100). Not modelled: pass 2's raise of a tree graph's bwIntra on <= 2
nodes ("increase bwIntra for trees (2 nodes or collnet)", while below twice bwInter: 24 -> 48 GB/s per channel on
A100 with HDR; it made Vidur's 2-node A100 rows fit worse, README), searches that fail at the first speed (a full
set of channels not found, cross-NIC rings), and NCCL_MIN/MAX_NCHANNELS.
"""

from __future__ import annotations

import math

#: Inter-node speed arrays (GB/s per channel), src/graph/search.cc at NVIDIA/nccl master 5067397 (speedArrayInter,
#: sm90SpeedArrayInter, sm100SpeedArrayInter; the first two as at v2.26.2-1, where sm100's started at 48.0).
SPEED_INTER = {
    "older": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24,
              0.12),
    "sm90": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "sm100": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
              0.24, 0.12),
}
#: A ring graph's maxChannels: MAXCHANNELS / 2 (src/init.cc; MAXCHANNELS 64 in src/include/device.h).
RING_MAX_CHANNELS = 32


def speed_array(arch):
    """The inter-node speed array NCCL searches for ``arch`` (SM90 Hopper, SM100 Blackwell, the generic one before)."""
    return SPEED_INTER["sm100" if arch == "blackwell" else "sm90" if arch == "hopper" else "older"]


def search_speed(arch, path_gbps):
    """The first speed of the array not above ``path_gbps`` (the search's start: ``while (speedArray[speedIndex] >
    maxBw) speedIndex++``), GB/s."""
    arr = speed_array(arch)
    return next((s for s in arr if s <= path_gbps), arr[-1])


def ring_graph(arch, nics, nic_gbps, pci_gbps, nvlink_gbps=None, speeds=None):
    """``(channels, GB/s per channel)`` of NCCL's ring (and tree) graph on a node whose ``nics`` GPUs each have a NIC
    of ``nic_gbps`` behind a PCIe link of ``pci_gbps``: the first speed the path allows, as many channels as the NICs
    and PCIe links carry at it, then ncclTopoDupChannels. ``nvlink_gbps``: NCCL's NVLink bandwidth per GPU (its
    bwIntra): a GPU forwards every channel over NVLink but those it sends to its own NIC, ``channels x (1 - 1/nics)
    x speed`` of it, which bounds the channels too (NVL72: 721.8 / (48 x 71/72) -> 15). ``speeds``: another
    release's speed array (:func:`astra_gpu_model.nccl_tuning.speed_array`), else master's."""
    path = min(nic_gbps, pci_gbps)
    speed = search_speed(arch, path) if speeds is None else next((s for s in speeds if s <= path), speeds[-1])
    per_nic = max(1, int(math.floor(path / speed + 1e-9)))
    channels = min(RING_MAX_CHANNELS, max(1, nics) * per_nic)
    if nvlink_gbps and nics > 1:
        channels = max(1, min(channels, int(math.floor(nvlink_gbps / (speed * (1 - 1 / nics)) + 1e-9))))
    sm_above_80 = arch in ("hopper", "blackwell")
    if speed >= 25.0 and not (sm_above_80 and speed < 50.0 and channels > 4):
        doubled = min(2 * channels, RING_MAX_CHANNELS)
        speed /= -(-doubled // channels)
        channels = doubled
    return channels, speed


def ring_bus(channels, speed):
    """NCCL's own bus bandwidth (GB/s) of a ring across nodes, the figure its tuning model ranks the ring by:
    ``busBw = graphs[a]->nChannels * bw``, ``bw`` the ring graph's bwInter on > 2 nodes and bwIntra on <= 2, equal on a
    ring graph (pass 2 raises only a tree's bwIntra) (src/graph/tuning.cc ncclTopoTuneModel, NVIDIA/nccl v2.26.2-1
    lines 250-253; master 5067397 the same). ``(channels, speed)``: :func:`ring_graph`'s. 8 H100 with 8 x 400 Gb/s
    NICs: 8 x 48 = 384 GB/s, the NVLink bound of 370.8 quantized upwards; the model times a ring with the latter."""
    return channels * speed


#: What a ring or tree collective's channel count at run time depends on (src/enqueue.cc topoGetAlgoInfo, "Ring/Tree
#: channel tuning", the same in NVIDIA/nccl v2.26.2-1 and master 5067397): a channel's threads (tuning.cc maxThreads:
#: NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512 (a ring's 256 only where
#: ``bwIntra x nChannels <= PCI_BW``, 12 GB/s, never on NVLink) and its bytes per thread (src/include/comm.h
#: NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD 8 / 8 / 64; tuning.cc ``threadThresholds[RING][LL] *= nRanks``).
SIZE_MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
SIZE_THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}


def size_channels(algo, proto, n_bytes, n_ranks, channels):
    """The channels NCCL runs a ring or tree collective of ``n_bytes`` (NCCL's nBytes) on, out of the communicator's
    ``channels``: ``while (nBytes < nc * nt * threadThreshold) { if (nc >= 2) nc--; else break; }`` after the pair is
    picked (the pick itself assumes every channel). 16 channels, tree LL: 8 KiB -> 2 (8192 < 3 x 512 x 8), 64 KiB ->
    16; ring LL on 16 ranks: 1 MiB -> 16, 512 KiB -> 8. Other algorithms keep ``channels``."""
    if algo not in ("ring", "tree") or proto not in SIZE_MAX_THREADS:
        return channels
    per_channel = SIZE_MAX_THREADS[proto] * SIZE_THREAD_THRESHOLD[proto] * (n_ranks if algo == "ring" and proto == "LL"
                                                                            else 1)
    nc = channels
    while nc >= 2 and n_bytes < nc * per_channel:
        nc -= 1
    return nc


#: NCCL's tree graph patterns (src/include/graph.h: NCCL_TOPO_PATTERN_BALANCED_TREE 1, NCCL_TOPO_PATTERN_TREE 3).
TREE_PATTERN_BALANCED, TREE_PATTERN_TREE = "balanced", "tree"
TREE_PATTERNS = (TREE_PATTERN_BALANCED, TREE_PATTERN_TREE)
#: ``if (a == NCCL_ALGO_TREE && comm->maxTreePattern == NCCL_TOPO_PATTERN_TREE) busBw *= .85;`` (src/graph/tuning.cc,
#: NVIDIA/nccl v2.26.2-1 line 261, master 5067397 line 336): every protocol of the tree, in NCCL's choice and here.
TREE_PATTERN_SHARE = 0.85
#: Architectures whose search falls back to NCCL_TOPO_PATTERN_TREE where no balanced tree is found (``ccMin >= 90``).
TREE_FALLBACK_ARCHS = ("hopper", "blackwell")
#: The most GPUs of an HGX board (x86 host, PCIe switches, one NIC per GPU). A larger NVLink domain is a rack of Grace
#: superchips (GB200/GB300 NVL72: the ConnectX-7s hang off the Grace CPUs' PCIe, two GPUs per Grace, NCCL 2.27.3's
#: notes: "On C2C platforms use GDRDMA on NICs which are connected to the CPUs"), where both GPUs of a superchip reach
#: its NICs at the same path type and the balanced tree is found: ASSUMPTION for every domain of more than 8 GPUs.
HGX_BOARD_GPUS = 8


def tree_pattern(arch, ppn, nodes, link, override=None):
    """The pattern of NCCL's tree graph across ``nodes`` nodes of ``ppn`` GPUs (None on one node, where it is not read).

    NCCL's search (src/graph/search.cc ncclTopoCompute, NVIDIA/nccl v2.26.2-1 lines 978 and 1053-1057; master
    5067397 lines 1215-1218) starts the tree graph as NCCL_TOPO_PATTERN_BALANCED_TREE: a channel enters a node through
    NIC n into GPU a and leaves through NIC n from GPU a *and* a second GPU b, each at half the speed. It follows
    every path at the narrowest PCIe type first (``typeInter`` = the GPUs' shortest path to a NIC, PIX on an HGX
    node), and both GPUs must reach NIC n at that type (ncclTopoFollowPath: ``path->type > type`` fails). Where each
    NIC shares its PCIe switch with one GPU only (the 8-rail HGX layout: one ConnectX-7 per GPU in the NVIDIA DGX
    H100 User Guide's "Network Modules" table; an 8-GPU node's ``nvidia-smi topo -mp``, GPU0-NIC0 PIX and GPU0-NIC1
    NODE, each GPU PIX to its own NIC only, deepseek-ai/DeepEP#60) no balanced channel exists there, and before
    widening the path type the search tries "a simpler tree" (``if (ccMin >= 90 && pattern ==
    NCCL_TOPO_PATTERN_BALANCED_TREE) pattern = NCCL_TOPO_PATTERN_TREE``): every NIC channel in and out of one GPU,
    which finds one channel per NIC at the first speed, the ring's count, and ends the search (``nChannels ==
    maxChannels``). One GPU per node is always NCCL_TOPO_PATTERN_TREE (``if (ngpus == 1)``).

    So: ``"tree"`` at one GPU per node, and on a Hopper or Blackwell (``arch``) NVSwitch (``link``) board of at most
    :data:`HGX_BOARD_GPUS` with one NIC per GPU (the model's node); ``"balanced"`` elsewhere (Ampere has no fallback;
    an NVL72 rack's Grace superchips share their NICs between two GPUs) and where ``override``
    (NcclConfig.tree_pattern) says a second GPU reaches each NIC at the same PCIe distance (two GPUs and their NIC on
    one switch: NVIDIA/nccl#1197's H100-class node, NCCL 2.19.4, logs the tree graph "Pattern 1 ... type NVL/PIX")."""
    if nodes <= 1:
        return None
    if ppn == 1:
        return TREE_PATTERN_TREE
    if override is not None:
        return override
    if arch in TREE_FALLBACK_ARCHS and link == "nvswitch" and ppn <= HGX_BOARD_GPUS:
        return TREE_PATTERN_TREE
    return TREE_PATTERN_BALANCED


__all__ = ["RING_MAX_CHANNELS", "SPEED_INTER", "ring_graph", "ring_bus", "search_speed", "speed_array",
           "size_channels", "SIZE_MAX_THREADS", "SIZE_THREAD_THRESHOLD", "tree_pattern", "TREE_PATTERNS",
           "TREE_PATTERN_BALANCED", "TREE_PATTERN_TREE", "TREE_PATTERN_SHARE", "TREE_FALLBACK_ARCHS", "HGX_BOARD_GPUS"]
