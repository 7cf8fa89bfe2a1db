"""astra-workload-generators: ASTRA-sim 1.0 text workloads, microbenchmark traces and trace scaling for
astra-sim-py (``astra workload ...`` and the ``text`` workload format)."""

from .micro import chakra_suite, collective_trace, compute_trace, graph_trace, memory_trace, p2p_trace
from .scale import check_replicable, scale_trace
from .text import convert_text, parse_text, parse_text_file

__all__ = [
    "convert_text", "parse_text", "parse_text_file",
    "collective_trace", "p2p_trace", "compute_trace", "memory_trace", "graph_trace", "chakra_suite",
    "scale_trace", "check_replicable",
]
