"""TPU-like platforms for ``astra run --platform tpu-v3 | tpu-v4 | tpu-v5p | tpu-v6e``: a systolic chip + its ICI torus.

A platform is a slice of chips joined by ICI in a torus (v3, v6e: 2D; v4, v5p: 3D; ``--tpu-topology AxB[xC]``), and
``--nodes N`` slices joined by the data-centre network (DCN). The generated analytical network has one
``Ring`` dimension per torus dimension (a torus is a ring per dimension; bandwidth = one ICI link, per
direction) and, for N > 1, a ``Switch`` dimension for the DCN. One slice's collectives are the ``torus`` algorithm
(:mod:`.torus`: every axis the group spans at once, both directions, the scaling book's rule); several slices keep
the kernel's ``ring``. The compute side is a SCALE-sim config
written from the preset: the chip's MXUs side by side as one array, weight stationary, SRAMs, and the
array's operand feed split over the SRAM interfaces (words are bytes, SCALE-sim's word size). On a TPU every MXU
operand comes out of VMEM, whose bandwidth to the MXUs is about 22 times HBM's (the scaling book), so that is the
feed; HBM bounds a GEMM from below through the bytes it must move at least once (the ``systolic`` model's
``--systolic-hbm-gbps`` floor), and memory-bound ops stream through it: at the vendor's measured copy rate where
one is published (v6e: 1359.6 of 1638 GB/s), else at the nominal bandwidth. Every number has a source or is marked
ASSUMPTION / UNVERIFIED in ``sources``.

Bandwidths in the network YAML are GiB/s (the analytical backend's GB = 2**30 bytes), converted from the
vendors' decimal figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction

from astra_sim.errors import ConfigError
from astra_sim.platforms import Platform, PlatformSetup, check_nodes

from astra_compute_systolic.config import SystolicConfig, write_config

GIB = 1 << 30

CLOUD_V3 = "Google Cloud TPU docs, 'TPU v3' (cloud.google.com/tpu/docs/v3): "
CLOUD_V4 = "Google Cloud TPU docs, 'TPU v4' (cloud.google.com/tpu/docs/v4): "
CLOUD_V5P = "Google Cloud TPU docs, 'TPU v5p' (cloud.google.com/tpu/docs/v5p): "
CLOUD_V6E = "Google Cloud TPU docs, 'TPU v6e' (docs.cloud.google.com/tpu/docs/v6e): "
SCALING_BOOK = ("Austin et al., 'How to Scale Your Model', part 2 'How to Think About TPUs' "
                "(jax-ml.github.io/scaling-book/tpus; jax-ml/scaling-book tpus.md at 0819a7d): ")
TPU_INFO = "jax-ml/jax jax/_src/pallas/mosaic/tpu_info.py (at 4f32df24), per TensorCore: "

#: VMEM's bandwidth to the MXUs over HBM's. The scaling book: "VMEM bandwidth is around 22x higher than HBM bandwidth"
#: (and, in its worked problem, "let's consider VMEM bandwidth to the MXU as 22 times the HBM <-> VMEM bandwidth").
#: It states one ratio for TPUs, worked on v5e; each preset applies it to its own HBM bandwidth.
VMEM_OVER_HBM = 22


@dataclass(frozen=True)
class TpuPreset(Platform):
    """A TPU-like platform: slices of chips in an ICI torus (``--tpu-topology``), joined by DCN."""

    name: str
    description: str
    chip: str
    mxus: int                       # 128x128 MXUs per chip (TensorCores x MXUs per core)
    mxu_dim: int
    peak_bf16_tflops: float
    hbm_gbps: float                 # decimal GB/s
    hbm_gib: int
    torus_dims: int                 # 2 (v3) or 3 (v4)
    default_topology: tuple
    ici_gbps_per_link: float        # decimal GB/s per direction per link
    ici_hop_latency_ns: float
    dcn_gbit_per_chip: float
    sram_kib: tuple                 # (ifmap, filter, ofmap) KiB
    sources: dict
    hbm_stream_gbps: float | None = None  # decimal GB/s a memory-bound pass streams at, measured (None: hbm_gbps)
    ici_payload_gbps: float | None = None  # decimal GB/s of payload one link carries a direction, measured (None: nominal)

    family = "tpu"

    @property
    def gpus_per_node(self) -> int:
        """Chips per slice of the default torus (``--tpu-topology`` changes it)."""
        chips = 1
        for d in self.default_topology:
            chips *= d
        return chips

    def describe(self, nodes: int = 1) -> dict:
        return self.numbers(nodes)

    def variant(self, **changes):
        """A slice's size is its torus: a job of another chip count names one (``--tpu-topology``)."""
        if "gpus_per_node" in changes:
            dims = "x".join(["A", "B", "C"][:self.torus_dims])
            raise ConfigError(f"give --tpu-topology {dims} with {changes['gpus_per_node']} chips in all (each "
                              "dimension at least 2)")
        return super().variant(**changes)

    def devices_per_node(self, options) -> int:
        """Chips per slice: the ``--tpu-topology`` torus, or the default one."""
        chips = 1
        for d in parse_topology(options.get("tpu_topology"), self):
            chips *= d
        return chips

    def peak_tflops(self, dtype="bf16") -> float | None:
        """The chip's published peak, bf16 (its MXUs run bf16; other types: not stated)."""
        return self.peak_bf16_tflops if dtype == "bf16" else None

    def device_memory_bytes(self) -> int:
        """The chip's HBM (GiB, as Google states it), bytes."""
        return self.hbm_gib << 30

    def resolve(self, nodes: int, options: dict) -> PlatformSetup:
        """The slice's configurations and SCALE-sim config; the systolic arrays time the compute. Explicit
        ``--systolic-config``, ``--systolic-ghz`` and ``--systolic-hbm-gbps`` win."""
        provided = generate(self, nodes, options.get("tpu_topology"))
        implied = dict(provided["options"])
        for key in ("systolic_config", "systolic_ghz", "systolic_hbm_gbps"):  # explicit options win
            if options.get(key) is not None:
                implied.pop(key, None)
        defaults = {
            "compute_model": (f"systolic (implied by --platform {self.name}: compute nodes are timed on its arrays; "
                              "--compute-model replay replays the traced durations)"
                              if options.get("compute_model") is None
                              else f"{options['compute_model']} (--compute-model)"),
        }
        defaults["collective"] = (
            f"torus (implied by --platform {self.name} on one slice: every torus axis the group spans at once, both "
            "directions, the scaling book's cost rule; an explicit --system-configuration wins)" if nodes == 1 else
            f"ring (implied by --platform {self.name} on {nodes} slices: the kernel's ring on every dimension; the "
            "torus rule has no DCN term)")
        return PlatformSetup(provided["system_configuration"], provided["network_configuration"], options=implied,
                             compute_model="systolic", defaults=defaults)

    @property
    def ghz(self) -> Fraction:
        """Clock implied by the peak: peak = 2 FLOP x MXUs x dim^2 x clock (rounded to 10 MHz)."""
        hz = self.peak_bf16_tflops * 1e12 / (2 * self.mxus * self.mxu_dim * self.mxu_dim)
        return Fraction(round(hz / 1e7), 100)

    @property
    def stream_gbps(self) -> float:
        """The rate a memory-bound pass moves bytes through HBM (read + write), decimal GB/s: the vendor's measured
        copy rate where one is published (``hbm_stream_gbps``), else the nominal bandwidth. As the GPU model runs its
        memory-bound kernels at ``hbm_efficiency`` x HBM, not the datasheet's figure."""
        return self.hbm_stream_gbps if self.hbm_stream_gbps is not None else self.hbm_gbps

    @property
    def ici_link_gbps(self) -> float:
        """The rate ICI transfers are timed at, decimal GB/s per link and direction: the measured payload rate where
        one is published (``ici_payload_gbps``), else the nominal link rate. A link's signalling rate is not its
        payload rate (packet headers, flow control), as HBM's datasheet figure is not its copy rate (``stream_gbps``)."""
        return self.ici_payload_gbps if self.ici_payload_gbps is not None else self.ici_gbps_per_link

    @property
    def vmem_gbps(self) -> float:
        """VMEM's bandwidth to the MXUs, decimal GB/s: ``VMEM_OVER_HBM`` x HBM's (the scaling book's ratio)."""
        return VMEM_OVER_HBM * self.hbm_gbps

    def config(self) -> SystolicConfig:
        """The SCALE-sim config of one chip (USER bandwidth: VMEM's bytes per cycle to the MXUs, split in three).

        The interfaces feed the array, and a TPU's MXUs read their operands from VMEM, not HBM (the scaling book:
        "Data in HBM needs to be copied into VMEM before the TensorCore can do any computation with it"). Fed at
        HBM's rate, SCALE-sim re-streams a large GEMM's IFMAP from HBM for every column fold and stalls the array
        (v6e: a 6144 x 49152 x 12288 GEMM at 12.9 % of peak); XLA tiles a GEMM so that HBM carries each operand
        about once, which the ``systolic`` model's HBM floor counts instead."""
        per_cycle = Fraction(self.vmem_gbps) / self.ghz           # bytes (= words) per cycle
        share = max(1, int(per_cycle / 3))
        ikb, fkb, okb = self.sram_kib
        return SystolicConfig(self.mxu_dim, self.mxu_dim * self.mxus, ikb, fkb, okb, "ws", "USER", (share,),
                              share, share, run_name=self.name, path=f"<--platform {self.name}>")

    def numbers(self, nodes=1, topology=None) -> dict:
        topo = tuple(topology or self.default_topology)
        chips = 1
        for d in topo:
            chips *= d
        cfg = self.config()
        return {
            "name": self.name, "family": "tpu", "description": self.description, "gpu": self.chip,
            "gpus_per_node": chips, "nodes": nodes, "total_gpus": chips * nodes,
            "ici_topology": "x".join(str(d) for d in topo), "ici_links_per_chip": 2 * len(topo),
            "scaleup_technology": f"ICI {len(topo)}D torus",
            "scaleup_gb_per_s_per_direction": self.ici_gbps_per_link,
            "scaleup_gib_per_s_per_direction": round(self.ici_gbps_per_link * 1e9 / GIB, 6),
            "ici_payload_gb_per_s_per_direction": self.ici_link_gbps,  # what the simulation times ICI transfers at
            "nic": "DCN", "nic_gbit_per_s_per_gpu": self.dcn_gbit_per_chip,
            "hbm_bandwidth_gbps": self.hbm_gbps, "hbm_stream_gbps": self.stream_gbps, "hbm_capacity_gib": self.hbm_gib,
            "bf16_tflops": self.peak_bf16_tflops, "clock_ghz": float(self.ghz),
            "systolic_array": f"{cfg.rows}x{cfg.cols}", "dataflow": cfg.dataflow,
            "sram_kib": {"ifmap": cfg.ifmap_sram_kb, "filter": cfg.filter_sram_kb, "ofmap": cfg.ofmap_sram_kb},
            "sram_words_per_cycle": cfg.ifmap_read_bw, "vmem_to_mxu_gbps": self.vmem_gbps,
            "ici_hop_latency_ns": self.ici_hop_latency_ns,
            # the numbers no Google document gives (their source says ASSUMPTION or UNVERIFIED: why, in sources)
            "assumptions": [key for key, text in self.sources.items()
                            if str(text).lstrip().upper().startswith(("ASSUMPTION", "UNVERIFIED"))],
            "sources": dict(self.sources),
        }


_MODEL = ("ASSUMPTION: the chip's MXUs side by side as one 128 x (128 x MXUs) SCALE-sim array, weight stationary "
          "(each MXU holds weights; the compiler splits a GEMM's output columns over them); one layer at a time")
_SRAM = ("ASSUMPTION: IFMAP/filter/OFMAP scratchpads of the sizes given (the chips' VMEM, in 'vmem', is 32-128 MiB "
         "a chip; no per-operand split is published; with VMEM's feed, VMEM-sized thirds move a large GEMM's "
         "utilisation by at most 0.1 point)")
_SPLIT = ("ASSUMPTION in part: the interfaces carry VMEM's bandwidth to the MXUs, " + SCALING_BOOK +
          "'VMEM bandwidth is around 22x higher than HBM bandwidth' (one ratio for TPUs, worked on v5e; applied "
          "to this chip's HBM), split equally over the IFMAP, filter and OFMAP SRAM interfaces (the split is the "
          "assumption; a large GEMM does not stall at either half of it)")
_LAT = ("Austin et al., 'How to Scale Your Model', part 3 'Sharded Matrices' (jax-ml/scaling-book sharding.md "
        "at 0819a7d): 'Each hop over an ICI link has some intrinsic overhead regardless of the data volume. This "
        "is typically around 1us' (tpus.md, Question 5: 'the per-hop latency for TPU v5e is 1us'); one figure for "
        "TPUs, applied to each preset; Google publishes no per-hop latency (500 ns, unsourced, before 2026-11-30)")
_ICI_PAYLOAD = ("marin-community/marin#6736 (comment 'TPU ppermute payload sweep update', 2026-06-28, an agent-run "
                "experiment posted by dlwh): a barriered lax.ppermute of 1 KiB to 64 MiB a device in a "
                "lax.fori_loop, repeat-count slopes, 'Large-payload fit: time = 2.29 us + bytes / 86.8 GB/s' "
                "(v6e-8) and 'time = 4.55 us + bytes / 86.3 GB/s' (v5p-8); both chips' links are 100 GB/s a "
                "direction nominal, so the payload is 86-87 % of it. Corroborated by the scaling book's table "
                "(tpus.md at 0819a7d): 9e10 one-way a link for v5p and v6e, 90 %. ASSUMPTION: each device's "
                "payload crosses one link one way (a neighbour shift; the comment does not give the permutation), "
                "and the rate holds with every link of a chip busy")
#: One ICI hop (ns): the scaling book's typical figure (``_LAT``).
ICI_HOP_NS = 1000.0
#: A third of v6e's 128 MiB of VMEM (jax's tpu_info), KiB: each of its SCALE-sim scratchpads.
V6E_VMEM_THIRD_KIB = (128 << 10) // 3

PRESETS = {
    p.name: p
    for p in (
        TpuPreset(
            "tpu-v3", "TPU v3-like chip: 2 TensorCores x 2 MXUs (128x128), 32 GiB HBM2, ICI 2D torus",
            "TPU v3 (4 MXUs)", 4, 128, 123.0, 900.0, 32, 2, (4, 4), 82.0, ICI_HOP_NS, 100.0, (16384, 16384, 4096),
            {
                "mxus": CLOUD_V3 + "each chip has two TensorCores, each with two MXUs",
                "peak_bf16_tflops": CLOUD_V3 + "peak compute per chip 123 teraflops (bf16)",
                "hbm": CLOUD_V3 + "HBM2 capacity and bandwidth 32 GiB, 900 GBps",
                "clock": "derived: 123e12 / (2 x 4 MXUs x 128 x 128) = 0.94 GHz",
                "torus": CLOUD_V3 + "interconnect topology 2D torus; TPU Pod size 1024 chips",
                "ici_gbps_per_link": "UNVERIFIED: 656 Gb/s (82 GB/s) per ICI link and direction, as recalled from "
                                     "Norrie et al., 'The Design Process for Google's Training Chips: TPUv2 and "
                                     "TPUv3', IEEE Micro 2021; not in the sources available to this project",
                "dcn": "ASSUMPTION: 100 Gb/s of data-centre network per chip (one host NIC shared by 4 chips)",
                "ici_latency": _LAT, "array": _MODEL, "sram": _SRAM, "sram_bandwidth": _SPLIT,
                "vmem": TPU_INFO + "TPU v3 'vmem_capacity_bytes=16 * 1024 * 1024' (2 TensorCores: 32 MiB a chip)",
            },
        ),
        TpuPreset(
            "tpu-v4", "TPU v4-like chip: 2 TensorCores x 4 MXUs (128x128), 32 GiB HBM2, ICI 3D torus",
            "TPU v4 (8 MXUs)", 8, 128, 275.0, 1200.0, 32, 3, (4, 4, 4), 50.0, ICI_HOP_NS, 100.0,
            (32768, 32768, 8192),
            {
                "mxus": CLOUD_V4 + "each chip contains two TensorCores, each with four MXUs",
                "peak_bf16_tflops": CLOUD_V4 + "peak compute per chip 275 teraflops (bf16 or int8)",
                "hbm": CLOUD_V4 + "HBM2 capacity and bandwidth 32 GiB, 1200 GBps",
                "clock": "derived: 275e12 / (2 x 8 MXUs x 128 x 128) = 1.05 GHz",
                "torus": CLOUD_V4 + "3D mesh / 3D torus slices AxBxC, dimensions multiples of 4; a 4x4x4 cube is "
                                    "the unit (glennklockwood.com/garden/processors/TPUv4)",
                "ici_gbps_per_link": "glennklockwood.com/garden/processors/TPUv4 (after Jouppi et al., ISCA 2023): "
                                     "ICI provides 400G bandwidth in each direction (per link: 50 GB/s)",
                "dcn": "ASSUMPTION: 100 Gb/s of data-centre network per chip (Google publishes 50 Gb/s for v5p)",
                "ici_latency": _LAT, "array": _MODEL, "sram": _SRAM, "sram_bandwidth": _SPLIT,
                "vmem": TPU_INFO + "TPU v4 'vmem_capacity_bytes=16 * 1024 * 1024' (2 TensorCores: 32 MiB a chip), "
                                   "'cmem_capacity_bytes=134_000_000 // num_chip_cores'",
            },
        ),
        TpuPreset(
            "tpu-v5p", "TPU v5p: 2 TensorCores x 4 MXUs (128x128), 95 GiB HBM2e, ICI 3D torus",
            "TPU v5p (8 MXUs)", 8, 128, 459.0, 2765.0, 95, 3, (4, 4, 4), 100.0, ICI_HOP_NS, 50.0,
            (32768, 32768, 8192),
            {
                "mxus": CLOUD_V5P + "'Number of TensorCores per chip 2'; 'Each TensorCore has four Matrix Multiply "
                                    "Units (MXU)'",
                "peak_bf16_tflops": CLOUD_V5P + "'Peak compute per chip (BF16) (TFLOPs) 459'",
                "hbm": CLOUD_V5P + "'HBM capacity per chip (GiB) 95', 'HBM bandwidth per chip (GBps) 2765'",
                "clock": "derived: 459e12 / (2 x 8 MXUs x 128 x 128) = 1.75 GHz (Google publishes no clock)",
                "torus": CLOUD_V5P + "'Interconnect topology 3D torus'; slices AxBxC, a 4x4x4 cube (64 chips) the "
                                     "unit, 8960 chips per pod",
                "ici_gbps_per_link": CLOUD_V5P + "'Bidirectional inter-chip interconnect (ICI) bandwidth per chip "
                                                 "(GBps) 1200' (older revision: 'Interchip Interconnect BW 4800 "
                                                 "Gbps'); over a 3D torus's 6 links, both directions: "
                                                 "1200 / 6 / 2 = 100 GB/s per link and direction",
                "dcn": CLOUD_V5P + "'Data center network (DCN) bandwidth per chip (Gbps) 50'",
                "ici_latency": _LAT, "array": _MODEL, "sram": _SRAM + " (as tpu-v4)", "sram_bandwidth": _SPLIT,
                "vmem": TPU_INFO + "TPU v5p 'vmem_capacity_bytes=64 * 1024 * 1024' (2 TensorCores: 128 MiB a chip)",
                "ici_payload": _ICI_PAYLOAD + " (v5p: 86.3 GB/s)",
            },
            ici_payload_gbps=86.3,
        ),
        TpuPreset(
            "tpu-v6e", "TPU v6e (Trillium): 1 TensorCore x 2 MXUs (256x256), 32 GB HBM, ICI 2D torus",
            "TPU v6e (2 MXUs)", 2, 256, 918.0, 1638.0, 32, 2, (16, 16), 100.0, ICI_HOP_NS, 100.0,
            (V6E_VMEM_THIRD_KIB,) * 3,
            {
                "mxus": CLOUD_V6E + "'Each v6e chip contains one TensorCore'; 'Each TensorCore contains two "
                                    "256x256 matrix-multiply units (MXU)'",
                "peak_bf16_tflops": CLOUD_V6E + "'Peak compute per chip (bf16) 918 TFLOPs'",
                "hbm": CLOUD_V6E + "'HBM capacity per chip 32 GB', 'HBM bandwidth per chip 1638 GBps' (capacity "
                                   "taken as 32 GiB, as for the other TPUs)",
                "clock": "ASSUMPTION (derived): 918e12 / (2 x 2 MXUs x 256 x 256) = 3.50 GHz makes the array's peak "
                         "the published one; Google publishes no clock, and the real clock is likely lower with more "
                         "MAC units than the documented MXUs give",
                "torus": CLOUD_V6E + "'Interconnect topology 2D torus', 'TPU Pod size 256 chips' (default slice "
                                     "16x16, the pod); wraparound on both axes of 16: " + SCALING_BOOK +
                         "'For TPU v5e and Trillium we have pods which consist of a 16x16 2D torus', 'smaller "
                         "topologies can be requested without wraps on dims < 16'",
                "ici_gbps_per_link": CLOUD_V6E + "'Bidirectional inter-chip interconnect (ICI) bandwidth (per chip) "
                                                 "800 GBps', 'ICI ports per chip 4': 800 / 4 / 2 = 100 GB/s per link "
                                                 "and direction. Earlier revisions of the page: 'Inter-chip "
                                                 "interconnect (ICI) bandwidth 3584 Gbps' (112 GB/s a port, "
                                                 "superseded), then '3200 Gbps' (v5e: 1600), one direction: 4 x 100 "
                                                 "GB/s; 'All-reduce bandwidth per Pod 102.4 TB/s' is 256 x 4 x 100 "
                                                 "GB/s: the signalling rate; transfers are timed at the measured "
                                                 "payload rate ('ici_payload')",
                "dcn": CLOUD_V6E + "(the revision that lists hosts) 'Per-host NIC configuration 4 x 200 Gbps NIC', "
                                   "'Chips per host 8', 'Data center network bandwidth per Pod 25.6 Tbps': "
                                   "800 / 8 = 25,600 / 256 = 100 Gb/s per chip",
                "ici_latency": _LAT, "array": _MODEL, "sram_bandwidth": _SPLIT,
                "sram": "ASSUMPTION in part: the chip's VMEM (below: 128 MiB) split equally over the IFMAP, filter and "
                        "OFMAP scratchpads, 43,690 KiB each (the split is the assumption; the capacity is jax's "
                        "tpu_info). tpu-v4's 32/32/8 MiB, used until 2026-12-01, stalled the array on a plain "
                        "8192 x 8192 x 57344 GEMM (47.8 % of peak; stall-free at these sizes)",
                "vmem": TPU_INFO + "TPU v6e 'vmem_capacity_bytes=128 * 1024 * 1024' (1 TensorCore: 128 MiB a chip)",
                "hbm_stream": "Google's measured copy on a v6e-1, AI-Hypercomputer/tpu-recipes microbenchmarks/"
                              "README.md at 2a33362 ('python benchmark_hbm.py --num_elements=16777216 "
                              "--trace_matcher=\"jit_my_copy.*\"'): 'Tensor size (bytes): 33554432, time taken (ms, "
                              "median): 0.049359414, bandwidth (GBps, median): 1359.5960438266143', the kernel's "
                              "time from the trace, read + write counted (benchmark_hbm.py: 'tensor_size * 2'): "
                              "83.0 % of the page's 1638; one size published (32 MiB), taken as the rate of every "
                              "memory-bound pass",
                "ici_payload": _ICI_PAYLOAD + " (v6e: 86.8 GB/s)",
            },
            hbm_stream_gbps=1359.6,
            ici_payload_gbps=86.8,
        ),
    )
}


def preset_names():
    return list(PRESETS)


def get_preset(name) -> TpuPreset:
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise ConfigError(f"unknown TPU platform {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[key]


def parse_topology(text, preset: TpuPreset):
    if text is None:
        return tuple(preset.default_topology)
    try:
        dims = tuple(int(x) for x in str(text).lower().replace(",", "x").split("x") if x.strip())
    except ValueError:
        raise ConfigError(f"--tpu-topology must look like 4x4 or 4x4x8, got {text!r}") from None
    if len(dims) != preset.torus_dims:
        raise ConfigError(f"--tpu-topology {text!r}: {preset.name} has a {preset.torus_dims}D torus, give "
                          f"{preset.torus_dims} dimensions (e.g. {'x'.join(map(str, preset.default_topology))})")
    if any(d < 2 for d in dims):
        raise ConfigError(f"--tpu-topology {text!r}: every torus dimension needs at least 2 chips")
    return dims


def network_yaml(preset: TpuPreset, topology, nodes: int) -> str:
    numbers = preset.numbers(nodes, topology)
    dims = list(topology)
    topo = ["Ring"] * len(dims)
    bw = [round(preset.ici_link_gbps * 1e9 / GIB, 6)] * len(dims)  # the payload rate (``ici_link_gbps``)
    lat = [preset.ici_hop_latency_ns] * len(dims)
    route = ""
    if nodes > 1:
        topo.append("Switch")
        dims.append(nodes)
        bw.append(round(preset.dcn_gbit_per_chip * 1e9 / 8 / GIB, 6))
        lat.append(5000.0)
        route = "cross_dimension_route: dimension_order\n"
    return (
        f"# astra run --platform {preset.name}: {numbers['ici_topology']} ICI torus"
        f"{f' x {nodes} slices over DCN' if nodes > 1 else ''}\n"
        "# bandwidth: GB/s with GB = 2**30 bytes, per link and direction; latency: ns per hop\n"
        f"topology: [ {', '.join(topo)} ]\n"
        f"npus_count: [ {', '.join(str(d) for d in dims)} ]\n"
        f"bandwidth: [ {', '.join(repr(float(b)) for b in bw)} ]\n"
        f"latency: [ {', '.join(repr(float(x)) for x in lat)} ]\n"
        f"{route}"
    )


def system_json(preset: TpuPreset, dims: int, nodes: int = 1) -> dict:
    """One slice: the ``torus`` collective (:mod:`.torus`, every axis at once in both directions, the scaling book's
    rule); several slices over DCN keep the kernel's ``ring`` on every dimension (the torus rule has no DCN term)."""
    from astra_sim.config import default_system_config as system_config

    algorithm = "torus" if nodes == 1 else "ring"
    config = system_config(dims, algorithm, local_mem_bw=int(preset.hbm_gbps),
                           peak_perf=int(preset.peak_bf16_tflops))
    config["comm-streams"] = "per-communicator"
    return config


def generate(name, nodes=1, topology=None, directory=None) -> dict:
    """The platform's system JSON, network YAML and SCALE-sim .cfg as a dict (its Platform.resolve makes the PlatformSetup):
    in memory (:class:`astra_sim.generated.GeneratedFile`, which ``astra run`` writes to a private folder only
    while it runs and records inline in the report), or, with ``directory``, written there (paths)."""
    from astra_sim.generated import GeneratedFile, write_generated

    preset = name if isinstance(name, TpuPreset) else get_preset(name)
    check_nodes(nodes)
    topo = parse_topology(topology, preset)
    dims = len(topo) + (1 if nodes > 1 else 0)
    origin = f"--platform {preset.name} --nodes {nodes}" + (f" --tpu-topology {topology}" if topology else "")
    files = {
        "system_configuration": GeneratedFile("system.json",
                                              json.dumps(system_json(preset, dims, nodes), indent=1) + "\n", origin),
        "network_configuration": GeneratedFile("network.yml", network_yaml(preset, topo, nodes), origin),
        "systolic_config": GeneratedFile(f"{preset.name}.cfg", write_config(preset.config()), origin),
    }
    if directory is not None:
        files = write_generated(files, directory)
    return {
        "system_configuration": files["system_configuration"],
        "network_configuration": files["network_configuration"],
        "options": {"systolic_config": files["systolic_config"], "systolic_ghz": str(float(preset.ghz)),
                    # memory-bound ops and the GEMMs' HBM floor: the measured stream rate where published
                    "systolic_hbm_gbps": preset.stream_gbps,
                    # what the torus collective prices the ICI with (decimal GB/s per link and direction; ns)
                    "tpu_ici_gbps_per_link": preset.ici_link_gbps, "tpu_ici_hop_ns": preset.ici_hop_latency_ns},
    }


def describe_all(nodes=1) -> list:
    return [p.numbers(nodes) for p in PRESETS.values()]
