"""astra-workload-generators: ASTRA-sim 1.0 text workloads, microbenchmark traces and trace scaling for
astra-sim-py (``astra workload ...`` and the ``text`` workload format).

The Python API other tools call instead of the command lines: :class:`LlmSpec`, :func:`generate_llm_workload` and
:func:`llm_summary` (``astra workload llm``), :func:`generate_micro` (``astra workload micro``)."""


__all__ = [
    "convert_text", "parse_text", "parse_text_file",
    "collective_trace", "p2p_trace", "compute_trace", "memory_trace", "graph_trace", "chakra_suite",
    "scale_trace", "check_replicable", "generate_micro", "LlmSpec", "generate_llm_workload", "llm_summary",
]


#: each public name's module, imported on first use (loading the plugin for a run or another command stays cheap)
_MODULES = {"llm": ("LlmSpec", "generate_llm_workload", "llm_summary"),
            "micro": ("chakra_suite", "collective_trace", "compute_trace", "generate_micro", "graph_trace",
                      "memory_trace", "p2p_trace"),
            "scale": ("check_replicable", "scale_trace"), "text": ("convert_text", "parse_text", "parse_text_file")}


def __getattr__(name):
    for module, names in _MODULES.items():
        if name in names:
            import importlib

            return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
