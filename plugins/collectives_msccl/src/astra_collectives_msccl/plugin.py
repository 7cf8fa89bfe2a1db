"""Registers the custom collective formats and the ``astra msccl`` command (imported only when used)."""

from astra_sim import hookimpl
from astra_sim.api import CollectiveAlgorithmSpec


class _Lazy:
    """A custom collective format whose module is imported on first use."""

    def __init__(self, module, name):
        self._module, self._name, self._format = module, name, None

    def _get(self):
        if self._format is None:
            import importlib

            self._format = getattr(importlib.import_module(self._module), self._name)()
        return self._format

    def matches(self, path):
        return self._get().matches(path)

    def load(self, path, context):
        return self._get().load(path, context)


@hookimpl
def astra_register_collective_algorithms(registry):
    registry.collective_algorithm(
        "msccl",
        CollectiveAlgorithmSpec("custom", _Lazy("astra_collectives_msccl.msccl", "MscclFormat")),
        "MSCCL-IR XML algorithms (all-reduce-implementation-custom: [algo.xml])",
    )
    registry.collective_algorithm(
        "chakra_custom",
        CollectiveAlgorithmSpec("custom", _Lazy("astra_collectives_msccl.chakra_custom", "ChakraCustomFormat")),
        "the reference's custom collectives: one Chakra ET per rank, <prefix>.<rank>.et",
    )


@hookimpl
def astra_register_commands(subparsers):
    from astra_collectives_msccl.convert import register_command

    register_command(subparsers)


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("MSCCL-IR collectives (plugin collectives_msccl)")
    group.add_argument("--msccl-protocol", action="store_true", default=None,
                       help="add the XML's protocol overhead to every message (LL x2, LL128 x128/120, Simple x1)")
