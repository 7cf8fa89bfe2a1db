"""Congestion-unaware analytical network backend for astra-sim-py."""

from astra_network_analytical.model import AnalyticalNetwork, NetworkConfig, in_switch_spec, parse_network_config

__all__ = ["AnalyticalNetwork", "NetworkConfig", "in_switch_spec", "parse_network_config"]
