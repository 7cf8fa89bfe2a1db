"""What SCALE-sim's COMPUTE_REPORT.csv says about one layer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerCycles:
    """One layer's cycles and utilisation, field for field SCALE-sim 3.0's COMPUTE_REPORT.csv.

    ``total_cycles_with_prefetch`` is "Total Cycles (incl. prefetch)": from the first DRAM read of the
    initial SRAM fill to the last OFMAP DRAM write. ``total_cycles`` is "Total Cycles": from the first
    array cycle to the last OFMAP word stored, stalls included. ``stall_cycles`` is "Stall Cycles".
    Percentages are SCALE-sim's (``overall_util`` uses ``total_cycles``).
    """

    total_cycles_with_prefetch: int
    total_cycles: int
    stall_cycles: int
    overall_util: float
    mapping_efficiency: float
    compute_util: float
    compute_cycles: int          # array cycles without stalls (folds x fold length)
    folds: int
    macs: int

    def report_row(self, layer_id=0) -> str:
        """The COMPUTE_REPORT.csv line SCALE-sim writes (its float formatting is Python's ``str``)."""
        items = [self.total_cycles_with_prefetch, self.total_cycles, self.stall_cycles, self.overall_util,
                 self.mapping_efficiency, self.compute_util]
        return f"{layer_id}, " + ", ".join(str(x) for x in items) + ","

    def as_dict(self) -> dict:
        return {
            "total_cycles_with_prefetch": self.total_cycles_with_prefetch, "total_cycles": self.total_cycles,
            "stall_cycles": self.stall_cycles, "overall_util_percent": self.overall_util,
            "mapping_efficiency_percent": self.mapping_efficiency, "compute_util_percent": self.compute_util,
            "compute_cycles": self.compute_cycles, "folds": self.folds, "macs": self.macs,
        }
