"""NCCL's algorithm choice as an older release made it (``--nccl-version``), across nodes.

:mod:`astra_gpu_model.nccl` times a collective in two steps: the (algorithm, protocol) pair NCCL *picks* with its
tuning model (``src/graph/tuning.cc``), then what that pair *costs*. Its constants are NVIDIA/nccl master's
(5067397). NCCL's model changed between releases, and a run got the pair its own release picked: a published
nccl-tests sweep on NCCL 2.26.2 ran what 2.26.2's model chose. So with a version, the pick follows that release's
model; the cost stays the model's (master's constants, calibrated), because the constants that changed are NVIDIA's
later estimate of the same hardware: NCCL 2.28.3's release notes, "Improved NVLS/NVLSTree tuning prediction to improve
algorithm and protocol selection. NVLSTree Tuning Fixes. Update tuning data for H100, GB200-NV72".

Releases read: NVIDIA/nccl tags v2.26.2-1 through v2.26.6-1 (their ``src/graph/tuning.cc`` and
``src/graph/search.cc`` are the same blobs). What differs from master there, on the machines the model knows:

* NVLSTree's network latency: hwLat[NET][NVLS_TREE] 14 us (20.9 from v2.28.9-1);
* NVLSTree's bandwidth: ``bw = min(bwIntra, nNodes <= 2 ? bwInter : bwInter/2)``, ``busBw = nChannels * bw`` and
  ``busBw *= 5.0/6.0`` to algorithm bandwidth (from v2.28.3-1: NVLS's efficiency, the 2-node doubling and the
  perChMaxNVLSTreeBws caps, :func:`astra_gpu_model.nccl.nvls_tree_bus`);
* its NVLS graph (:func:`nvls_graph`): the channels and speeds the search finds, not one channel per head at the
  ring's speed;
* Blackwell: its per-channel caps are Hopper's doubled (``2*36.7``, ``2*29.0``, ``2*41.4`` ...), its inter-node
  speed array is Hopper's (48.0 first; master 96.0), SM100_NVLINK_BW 40.0 (master 40.1).

Only choices across nodes follow the release: one node's (NVLS's own terms also changed) stay master's.
"""

from __future__ import annotations

import functools
import math

#: The model's own constants: NVIDIA/nccl master 5067397.
MASTER = "master"
#: NCCL 2.26.x (tags v2.26.2-1 ... v2.26.6-1).
V2_26 = "2.26"
TUNINGS = (MASTER, V2_26)

#: hwLatencies[NET][NVLS_TREE][Simple] (us), and hwLatencies[NVLINK][NVLS_TREE][Simple] (25 us in both).
NVLS_TREE_NET_LAT_US = {V2_26: 14.0}
NVLS_TREE_NVLINK_LAT_US = 25.0
#: ``busBw *= ratio`` for NVLS and NVLS_TREE in v2.26.2-1 tuning.cc: ``ratio *= 5.0/6.0``.
NVLS_TREE_ALG_RATIO = 5.0 / 6.0
#: search.cc v2.26.2-1: sm90SpeedArrayInter (sm100SpeedArrayInter is the same list) and speedArrayInter (older).
SPEEDS_INTER_226 = {
    "sm90": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    "older": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
}
#: Blackwell in v2.26.2-1 tuning.cc (``2*`` Hopper's) and topo.h (SM100_NVLINK_BW 40.0); the other keys as master.
BLACKWELL_226 = dict(ring_ll128=(2 * 36.7,) * 3, tree_ll128=(2 * 36.7, 2 * 36.7, 2 * 29.0),
                     tree=(2 * 38.7, 2 * 41.4, 2 * 36.0), link=40.0)
#: NCCL_MAX_NVLS_ARITY (src/include/device.h): an NVLS graph has at most 32 channels (one head each).
NVLS_MAX_CHANNELS = 32


#: What ``--nccl-version`` accepts, as its errors say it.
ACCEPTED = ("2.26.x (2.26, 2.26.2 ... 2.26.6, v2.26.2-1: NCCL 2.26's tuning, tags v2.26.2-1 to v2.26.6-1) or master "
            "(the default: NVIDIA/nccl 5067397); other releases' tuning was not read")


def tuning_for_version(version):
    """The tuning a ``--nccl-version`` string names: ``None`` -> master's; ``2.26.x`` -> :data:`V2_26`. Other
    releases were not read: an error, not a guess."""
    if version is None:
        return MASTER
    text = str(version).strip().lstrip("v")
    parts = text.split("-")[0].split(".")
    if len(parts) >= 2 and parts[:2] == ["2", "26"]:
        return V2_26
    if text == MASTER:
        return MASTER
    from astra_sim.errors import ConfigError

    raise ConfigError(f"--nccl-version {version!r}: accepted: {ACCEPTED}")


def version_arg(text):
    """``--nccl-version``'s argparse type: the text as given, once :func:`tuning_for_version` knows it, so that a
    release the model does not reproduce is refused where the option is parsed (``astra run``, a sweep's or search's
    run options, a validation case's run words), not when the first collective across nodes is timed."""
    from astra_sim.errors import ConfigError

    try:
        tuning_for_version(text)
    except ConfigError:
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a release the model reproduces; accepted: {ACCEPTED}") \
            from None
    return text


def add_release_arguments(group, applies=""):
    """``--nccl-version`` and ``--nccl-nvls``, defined once: ``astra run``'s (the platform options) and ``astra
    search``'s, which runs its layouts with them and prices their lower bounds with the same choice; ``applies``
    ends each help text (where the flags act, when not only in the run)."""
    group.add_argument("--nccl-version", default=None, metavar="X.Y.Z", type=version_arg,
                       help="the NCCL release whose tuning model picks the algorithm and protocol across nodes "
                            "(2.26.x; default: NCCL master's, 5067397); the pick is timed with the model's terms"
                            + applies)
    group.add_argument("--nccl-nvls", default=None, choices=("on", "off"),
                       help="NCCL_NVLS_ENABLE: off takes NVLink SHARP (NVLS) and NVLSTree out of NCCL's choice, as "
                            "NCCL_NVLS_ENABLE=0 does; default on where the GPU has it (Hopper, Blackwell on NVSwitch)"
                            + applies)


def caps(arch_caps, arch, tuning, nodes):
    """The per-architecture constants NCCL's choice reads (nccl.ARCH's entry ``arch_caps``), at ``tuning``."""
    if tuning == V2_26 and nodes > 1 and arch == "blackwell":
        return {**arch_caps, **BLACKWELL_226}
    return arch_caps


def speed_array(arch, tuning):
    """The inter-node speed array NCCL's search walks, or None for master's (:func:`nccl_graph.speed_array`)."""
    if tuning != V2_26:
        return None
    return SPEEDS_INTER_226["sm90" if arch in ("hopper", "blackwell") else "older"]


def nvls_graph(speeds, heads, nic_gbps, pci_gbps, nvlink_gbps):
    """``(channels, bwIntra, bwInter)`` of NCCL 2.26's NVLS graph on a node of ``heads`` GPUs, each with a NIC of
    ``nic_gbps`` behind PCIe ``pci_gbps``, NVLink ``nvlink_gbps`` (NCCL's per-GPU NVL bandwidth). Read from
    src/graph/search.cc (v2.26.2-1):

    * the search starts at the first speed not above the GPU -> NIC path (``system->maxBw``);
    * a channel takes its speed on every GPU's NVSwitch link and twice on its head's (ncclTopoSearchTryNvls:
      ``d0 == g ? 2 : 1``), so ``(channels + 1) x speed <= nvlink``; at most ``min(NCCL_MAX_NVLS_ARITY, ngpus)``
      channels, one head (with its NIC) each;
    * ncclTopoCompareGraphs keeps a graph with more channels, or more channels x bwInter; pass 1 lowers the speed
      while the next is above .49 of the best one's and stops at the first graph with every channel (``time == -1``);
    * pass 2 raises bwInter, channels fixed, while it is below twice bwIntra and the path allows it.

    8 H100 (NVL 18 x 20.6 = 370.8) with 8 x 400 Gb/s NICs (path 48): 48 -> 6 channels, 45 -> 7, 40 -> 8 (all):
    8 channels at 40 GB/s, bwInter raised to 48."""
    path = min(nic_gbps, pci_gbps)
    most = max(1, min(NVLS_MAX_CHANNELS, heads))
    i = next((k for k, s in enumerate(speeds) if s <= path), len(speeds) - 1)
    best = None
    while True:
        speed = speeds[i]
        n = min(most, int(math.floor(nvlink_gbps / speed + 1e-9)) - 1)
        if n >= 1 and (best is None or n > best[0] or n * speed > best[0] * best[1]):
            best = (n, speed)
        if (best is not None and best[0] == most) or i == len(speeds) - 1:
            break
        if best is not None and speeds[i + 1] / best[1] <= 0.49:
            break
        i += 1
    if best is None:
        best = (1, speeds[-1])
    n, intra = best
    j = speeds.index(intra)
    inter = intra
    while j > 0 and inter < 2 * intra and speeds[j - 1] <= path:
        j -= 1
        inter = speeds[j]
    return n, intra, inter


def nvls_tree_terms(arch, ppn, nodes, nic_gbps, pci_gbps, bw_intra, plugin_us=0.0):
    """``(lat_us, alg_bw)`` NCCL 2.26's model gives an NVLSTree all-reduce across ``nodes`` nodes of ``ppn`` GPUs:
    ``lat = hwLat[NVLINK] + 2 log2i(nNodes) interLat`` = 25 + 2 log2i(nodes) x (14 + ``plugin_us``) us (interLat is
    hwLat[NET] plus the net plugin's latency, twice for Simple: ``plugin_us`` is that sum, tuning.cc v2.26.2-1 lines
    301-304 and 340), and ``nChannels x
    min(bwIntra, nNodes <= 2 ? bwInter : bwInter / 2) x 5/6`` on its NVLS graph (:func:`nvls_graph`). 4 x 8 H100:
    8 x min(40, 48 / 2) x 5/6 = 160 GB/s; 2 nodes: 8 x 40 x 5/6 = 266.7 GB/s."""
    channels, intra, inter = nvls_graph(speed_array(arch, V2_26), ppn, nic_gbps, pci_gbps, bw_intra)
    bw = min(intra, inter if nodes <= 2 else inter / 2.0)
    lat = NVLS_TREE_NVLINK_LAT_US + 2 * (int(nodes).bit_length() - 1) * (NVLS_TREE_NET_LAT_US[V2_26] + plugin_us)
    return lat, channels * bw * NVLS_TREE_ALG_RATIO


# ---------------------------------------------------------------------------------------------- NCCL_ALGO, NCCL_PROTO
#: NCCL's names (src/init.cc v2.26.2-1 l. 42-44: ncclFuncStr, ncclAlgoStr, ncclProtoStr), matched case-insensitively.
ENV_FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ENV_ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
ENV_PROTOS = ("LL", "LL128", "Simple")


@functools.lru_cache(maxsize=128)
def parse_enable_list(text, elems, what):
    """``{function: frozenset of enabled elements}`` from an NCCL_ALGO / NCCL_PROTO string, as NCCL's ``parseList``
    reads it (src/graph/tuning.cc v2.26.2-1 l. 33-110; master the same): ``;``-separated entries, the first may lack
    a ``function:`` prefix and then applies to every function, a later one replaces its function's list; a list is
    ``,``-separated names, all others disabled, or after ``^`` the names disabled and all others enabled. An unknown
    name or function is NCCL's ncclInvalidUsage: a ConfigError here."""
    from astra_sim.errors import ConfigError

    enabled = {f: frozenset(elems) for f in ENV_FUNCS}
    for i, entry in enumerate(str(text).split(";")):
        prefix, sep, items = entry.partition(":")
        if not sep:
            if i:
                raise ConfigError(f"{what} {text!r}: all entries except the first must have a function prefix")
            prefix, items = None, entry
        funcs = [f for f in ENV_FUNCS if prefix is None or f.lower() == prefix.strip().lower()]
        if not funcs:
            raise ConfigError(f"{what} {text!r}: unknown function {prefix!r} (NCCL's: {', '.join(ENV_FUNCS)})")
        negate = items.startswith("^")
        names = set()
        for item in (items[1:] if negate else items).split(","):
            name = next((e for e in elems if e.lower() == item.strip().lower()), None)
            if name is None:
                raise ConfigError(f"{what} {text!r}: unknown element {item!r} (NCCL's: {', '.join(elems)})")
            names.add(name)
        for f in funcs:
            enabled[f] = frozenset(set(elems) - names if negate else names)
    return enabled


def env_arg(elems, what):
    """An argparse type: the NCCL_ALGO / NCCL_PROTO text as given, once :func:`parse_enable_list` accepts it."""

    def check(text):
        from astra_sim.errors import ConfigError

        try:
            parse_enable_list(text, elems, what)
        except ConfigError as err:
            import argparse

            raise argparse.ArgumentTypeError(str(err)) from None
        return text

    return check


def add_env_arguments(group):
    """``--nccl-algo`` and ``--nccl-proto`` (astra run's GPU platform options): NCCL_ALGO and NCCL_PROTO as a run
    sets them, which restrict the pairs NCCL's choice may pick (tuning.cc v2.26.2-1 l. 364-374: algoEnable /
    protoEnable); and ``--nccl-tree-pattern``, the node's PCIe layout as NCCL's tree search sees it. GCP's A3 Mega
    (GPUDirect-TCPXO) profile sets NCCL_ALGO=Ring,Tree NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0
    (google/nccl-plugin-gpudirect-tcpxo tcpxo_scripts/nccl-env-profile-simple.sh at 04815d1)."""
    group.add_argument("--nccl-algo", default=None, metavar="LIST", type=env_arg(ENV_ALGOS, "--nccl-algo"),
                       help="NCCL_ALGO: the algorithms NCCL may pick (e.g. Ring,Tree; ^NVLSTree; "
                            "allreduce:ring), NCCL's syntax and names; default: all")
    group.add_argument("--nccl-proto", default=None, metavar="LIST", type=env_arg(ENV_PROTOS, "--nccl-proto"),
                       help="NCCL_PROTO: the protocols NCCL may pick (LL, LL128, Simple; ^LL128; "
                            "allreduce:Simple), NCCL's syntax; default: all. NCCL itself turns LL128 off across "
                            "nodes where the GPU reaches its NIC through the CPU (tuning.cc: typeInter > PXN): "
                            "^LL128 says so")
    group.add_argument("--nccl-tree-pattern", default=None, choices=("balanced", "tree"),
                       help="the pattern NCCL's topology search gives the tree graph across nodes: tree (each NIC's "
                            "PCIe switch holds one GPU, the 8-rail HGX board: NCCL's x0.85 on the tree) or balanced "
                            "(a second GPU shares each NIC's switch); default: tree on Hopper/Blackwell NVSwitch "
                            "boards of up to 8 GPUs, balanced elsewhere (nccl_graph.tree_pattern)")


__all__ = ["MASTER", "V2_26", "TUNINGS", "ACCEPTED", "tuning_for_version", "version_arg", "add_release_arguments",
           "caps", "speed_array", "nvls_graph", "nvls_tree_terms", "BLACKWELL_226", "SPEEDS_INTER_226",
           "ENV_FUNCS", "ENV_ALGOS", "ENV_PROTOS", "parse_enable_list", "env_arg", "add_env_arguments"]
