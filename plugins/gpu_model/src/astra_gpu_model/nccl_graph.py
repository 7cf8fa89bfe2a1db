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


__all__ = ["RING_MAX_CHANNELS", "SPEED_INTER", "ring_graph", "ring_bus", "search_speed", "speed_array",
           "size_channels", "SIZE_MAX_THREADS", "SIZE_THREAD_THRESHOLD"]
