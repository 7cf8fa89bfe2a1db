"""Registers the ``analytical`` network backend."""

from astra_sim import hookimpl

from astra_network_analytical.model import AnalyticalNetwork


@hookimpl
def astra_register_network_backends(registry):
    registry.network_backend(
        "analytical",
        AnalyticalNetwork.from_context,
        "congestion-unaware Ring/FullyConnected/Switch dimensions (the reference's analytical model)",
    )
