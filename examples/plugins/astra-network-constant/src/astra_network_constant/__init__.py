"""Example astra-sim-py plugin: the ``constant`` network backend.

Every message takes ``latency_ns + ceil(size_bytes / bandwidth_bytes_per_ns)`` ns.
"""

from astra_network_constant.network import ConstantNetwork, parse_config

__version__ = "0.1.0"

__all__ = ["ConstantNetwork", "parse_config", "__version__"]
