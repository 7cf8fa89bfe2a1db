"""The rest of the system: host, NVSwitch, NICs and scale-out switches per GPU, and the facility's PUE.

These draw a constant power over the step (``data/power.json``, ``systems``): their load-dependent part is small
beside the GPUs' and not modelled. A platform names its system entry (``platform_systems``); others use
``default`` (an 8-GPU HGX-class server). Scale-out switches count only when the run spans more than one node.
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_energy.power import power_data


@dataclass(frozen=True)
class SystemPower:
    """Watts per GPU beside the GPU itself, the node size and the system entry's name."""

    name: str
    host_w_per_gpu: float
    nvswitch_w_per_gpu: float
    nic_w_per_gpu: float
    network_switch_w_per_gpu: float
    gpus_per_node: int

    def components_w(self, nodes: int) -> dict:
        """Watts per GPU by component (scale-out switches only across nodes)."""
        return {"host": self.host_w_per_gpu, "nvswitch": self.nvswitch_w_per_gpu, "nic": self.nic_w_per_gpu,
                "network_switches": self.network_switch_w_per_gpu if nodes > 1 else 0.0}


def system_power(platform: str | None, gpus_per_node: int | None = None) -> SystemPower:
    """The system entry of ``platform`` (None: ``default``); ``gpus_per_node`` overrides the entry's node size."""
    data = power_data()
    name = data["platform_systems"].get(platform or "", "default")
    entry = data["systems"][name]
    return SystemPower(name=name, host_w_per_gpu=float(entry["host_w_per_gpu"]),
                       nvswitch_w_per_gpu=float(entry["nvswitch_w_per_gpu"]),
                       nic_w_per_gpu=float(entry["nic_w_per_gpu"]),
                       network_switch_w_per_gpu=float(entry["network_switch_w_per_gpu"]),
                       gpus_per_node=int(gpus_per_node or entry["gpus_per_node"]))


def default_pue() -> float:
    return float(power_data()["pue"]["default"])


__all__ = ["SystemPower", "system_power", "default_pue"]
