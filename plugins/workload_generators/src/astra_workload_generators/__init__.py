"""astra-workload-generators: ASTRA-sim 1.0 text workloads, microbenchmark traces and trace scaling for
astra-sim-py (``astra workload ...`` and the ``text`` workload format).

The Python API other tools call instead of the command lines: :class:`LlmSpec`, :func:`generate_llm_workload` and
:func:`llm_summary` (``astra workload llm``), :func:`generate_micro` (``astra workload micro``)."""

from .micro import chakra_suite, collective_trace, compute_trace, generate_micro, graph_trace, memory_trace, p2p_trace
from .scale import check_replicable, scale_trace
from .text import convert_text, parse_text, parse_text_file

__all__ = [
    "convert_text", "parse_text", "parse_text_file",
    "collective_trace", "p2p_trace", "compute_trace", "memory_trace", "graph_trace", "chakra_suite",
    "scale_trace", "check_replicable", "generate_micro", "LlmSpec", "generate_llm_workload", "llm_summary",
]


_LLM = ("LlmSpec", "generate_llm_workload", "llm_summary")


def __getattr__(name):
    """The LLM generator's API, imported on first use (loading the plugin for other commands stays cheap)."""
    if name in _LLM:
        from . import llm

        return getattr(llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
