"""astra-sim-py's packet-level network backend ``ns3``: ASTRA-sim's ns-3 inputs on the real ns-3 (PyPI ``ns3``).

Importing this package does not import ns-3; the backend does, when it is selected.
"""

__all__ = ["Ns3Network"]


def __getattr__(name):
    if name == "Ns3Network":
        from astra_network_ns3.backend import Ns3Network

        return Ns3Network
    raise AttributeError(name)
