"""``astra`` sub-commands of this plugin: ``astra infragraph`` (see :mod:`.infragraph`), ``astra fabric``
(:mod:`.fabric_command`)."""


def register(subparsers):
    """Add this plugin's sub-commands to the ``astra`` command."""
    from astra_network_congestion.infragraph_command import register_command

    register_command(subparsers)
    from astra_network_congestion.fabric_command import register_command as register_fabric

    register_fabric(subparsers)
