"""Grace memory over NVLink-C2C: a GB200/GB300 superchip's CPU memory as a memory tier for its two GPUs.

A Grace Blackwell superchip joins one Grace CPU and two Blackwell GPUs with NVLink-C2C; the GPUs read and write
the Grace's LPDDR5X directly (offloaded optimizer states, a KV cache spilled from HBM). The platform gives the
remote-memory backend (``memory_analytical``) one FIFO server per Grace, shared by its GPUs
(``PER_NODE_MEMORY_EXPANSION`` with ``num-npus-per-node`` = GPUs per Grace), so one MEM_LOAD/MEM_STORE of
``size`` bytes takes::

    latency_ns + size / bandwidth      bandwidth = min(C2C per direction, the Grace's LPDDR5X bandwidth)

and two GPUs of one superchip loading at once queue behind each other (they share the Grace's link and memory).
Bandwidths are decimal GB/s = bytes/ns, the backend's unit (an integer there: the reference stores it as one).
The capacity is reported (``astra platforms``), not enforced: the backend has no capacity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: NVLink-C2C between a Grace and its Blackwell GPUs: 900 GB/s both directions, so 450 GB/s each way
C2C_GB_PER_S_PER_DIRECTION = 450.0
C2C_SOURCE = ("NVIDIA GB200 NVL72 / GB200 superchip: 'NVLink-C2C interconnect' at 900 GB/s bidirectional "
              "(training.continuumlabs.ai 'NVIDIA GB200 NVL72': 'ultra-fast 900 GBps NVLink-C2C interconnect'; "
              "yobitel.com 'NVIDIA GB200': 'NVLink-C2C at 900 GB/s'), i.e. 450 GB/s per direction. ASSUMPTION "
              "(not published): the link is shared by the superchip's two GPUs, not 450 GB/s to each")
#: what starts one copy over C2C before its first byte
C2C_LATENCY_NS = 1000
C2C_LATENCY_SOURCE = ("ASSUMPTION: ~1 us from issuing a copy to Grace memory to its first byte (a DMA start over "
                      "NVLink-C2C); no published figure found")


@dataclass(frozen=True)
class GraceMemory:
    """One Grace's LPDDR5X as seen by the ``gpus_per_cpu`` GPUs of its superchip."""

    superchip: str
    capacity_gb_per_cpu: float     # decimal GB of LPDDR5X per Grace
    lpddr_gb_per_s_per_cpu: float  # decimal GB/s of one Grace's LPDDR5X
    sources: dict
    gpus_per_cpu: int = 2
    c2c_gb_per_s_per_direction: float = C2C_GB_PER_S_PER_DIRECTION
    latency_ns: int = C2C_LATENCY_NS

    def bandwidth_bytes_per_ns(self) -> int:
        """What one request streams at: the slower of C2C (one direction) and the Grace's LPDDR5X, truncated to
        an integer as the backend stores it."""
        return int(min(self.c2c_gb_per_s_per_direction, self.lpddr_gb_per_s_per_cpu))

    def config(self, total_gpus: int) -> dict:
        """The remote-memory JSON for ``total_gpus`` GPUs: one server per Grace (consecutive ranks share it). A
        job whose GPUs are not whole superchips (an odd partial node) gives each GPU its own Grace."""
        per_cpu = self.gpus_per_cpu if total_gpus % self.gpus_per_cpu == 0 else 1
        return {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": self.latency_ns,
                "remote-mem-bw": self.bandwidth_bytes_per_ns(), "num-nodes": total_gpus // per_cpu,
                "num-npus-per-node": per_cpu}

    def config_text(self, total_gpus: int) -> str:
        return json.dumps(self.config(total_gpus), indent=1) + "\n"

    def numbers(self) -> dict:
        """What ``astra platforms`` shows (units in the keys)."""
        return {"superchip": self.superchip, "capacity_gb_per_cpu": self.capacity_gb_per_cpu,
                "capacity_gb_per_gpu": round(self.capacity_gb_per_cpu / self.gpus_per_cpu, 3),
                "gpus_per_cpu": self.gpus_per_cpu, "lpddr_gb_per_s_per_cpu": self.lpddr_gb_per_s_per_cpu,
                "c2c_gb_per_s_per_direction": self.c2c_gb_per_s_per_direction,
                "bandwidth_bytes_per_ns": self.bandwidth_bytes_per_ns(), "latency_ns": self.latency_ns,
                "memory_type": "PER_NODE_MEMORY_EXPANSION (one FIFO per Grace)"}

    def all_sources(self) -> dict:
        """Every number's source, keyed ``grace_memory.<number>``."""
        return {f"grace_memory.{key}": text for key, text in
                {**self.sources, "c2c_gb_per_s_per_direction": C2C_SOURCE, "latency_ns": C2C_LATENCY_SOURCE}.items()}


GB200_GRACE = GraceMemory(
    "GB200", 480.0, 512.0,
    {"capacity_gb_per_cpu": "fibermall.com 'In-depth analysis for NVIDIA GB200': 'The system also includes 17TB of "
                            "DDR5X memory, with each Bianca chip equipped with 480GB of memory' (one Grace per "
                            "Bianca board of two GPUs)",
     "lpddr_gb_per_s_per_cpu": "yobitel.com 'NVIDIA GB200': '1x Grace CPU at 72 Neoverse V2 cores with up to 480 GB "
                               "LPDDR5X (512 GB/s)'"},
)

GB300_GRACE = GraceMemory(
    "GB300", round(17000.0 / 36, 3), round(14000.0 / 36, 3),
    {"capacity_gb_per_cpu": "NVIDIA GB300 NVL72 launch figures (vendordeep.com 'NVIDIA Launches Blackwell Ultra "
                            "GB300'): '36 Grace CPUs have 17TB LPDDR5X (14 TB/s)'; 17 TB / 36 Grace = 472 GB each",
     "lpddr_gb_per_s_per_cpu": "the same: 14 TB/s over 36 Grace CPUs = 389 GB/s each (below C2C's 450 GB/s per "
                               "direction, so LPDDR5X bounds a GB300 GPU's Grace-memory stream)"},
)
