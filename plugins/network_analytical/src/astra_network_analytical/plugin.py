"""Registers the ``analytical`` network backend and the ``inSwitch`` collective algorithm."""

from astra_sim import hookimpl
from astra_sim.api import CollectiveAlgorithmSpec

from astra_network_analytical.group_plan import IN_SWITCH_GROUP_PLANNER
from astra_network_analytical.model import AnalyticalNetwork


@hookimpl
def astra_register_network_backends(registry):
    registry.network_backend(
        "analytical",
        AnalyticalNetwork.from_context,
        "congestion-unaware Ring/FullyConnected/Switch dimensions (the reference's analytical model)",
    )


def _in_switch(com_type, rank, topo, size, direction, window):
    from astra_network_analytical.in_switch import InSwitch

    return InSwitch(com_type, rank, topo, size)


@hookimpl
def astra_register_collective_algorithms(registry):
    # Each rank sends to its ring neighbour and the switch waits for all members (rotation-symmetric). It runs on
    # any backend that declares switches (astra_sim.api.SwitchNetwork): analytical, congestion / flow, ns-3.
    registry.collective_algorithm(
        "inSwitch",
        CollectiveAlgorithmSpec("ring", _in_switch, symmetry="rotation", per_dimension_groups=True,
                                group_planner=IN_SWITCH_GROUP_PLANNER),
        "the Switch dimension's switch reduces (in-network)",
    )
