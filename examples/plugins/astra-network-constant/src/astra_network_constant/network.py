"""The ``constant`` network: one delay formula for every pair of NPUs, no state."""

from __future__ import annotations

import math

import yaml

from astra_sim.errors import ConfigError

#: The keys of the YAML file, with what each one means (used in error messages).
KEYS = {
    "npus": "number of NPUs, an integer >= 1",
    "latency_ns": "fixed cost of every message in ns, an integer >= 0",
    "bandwidth_bytes_per_ns": "bytes per ns, a number > 0",
}


def parse_config(path):
    """Read the backend's YAML file; every error names the file and the key.

    Returns ``(npus, latency_ns, bandwidth_bytes_per_ns)``.
    """
    if path is None:
        raise ConfigError("the constant network backend needs a network configuration file (--network-configuration)")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigError(f"network configuration file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"network configuration file {str(path)!r} is a directory") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with keys {', '.join(KEYS)}")
    for key in data:
        if key not in KEYS:
            raise ConfigError(
                f"{path}: unknown key {key!r}; the constant network backend reads {', '.join(KEYS)}"
            )
    for key, meaning in KEYS.items():
        if key not in data:
            raise ConfigError(f"{path}: key {key!r} is missing ({meaning})")

    def bad(key):
        return ConfigError(f"{path}: key {key!r} must be {KEYS[key].split(', ', 1)[1]}, got {data[key]!r}")

    npus, latency, bandwidth = data["npus"], data["latency_ns"], data["bandwidth_bytes_per_ns"]
    if isinstance(npus, bool) or not isinstance(npus, int) or npus < 1:
        raise bad("npus")
    if isinstance(latency, bool) or not isinstance(latency, int) or latency < 0:
        raise bad("latency_ns")
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or not bandwidth > 0:
        raise bad("bandwidth_bytes_per_ns")
    if isinstance(bandwidth, float) and bandwidth.is_integer():
        bandwidth = int(bandwidth)
    return npus, latency, bandwidth


class ConstantNetwork:
    """A network backend (see :class:`astra_sim.api.NetworkBackend`).

    The kernel calls it directly for every message, never through a hook:
    :meth:`delay_ns` when the backend has it, else :meth:`send`, which
    schedules the delivery callback on the run's event engine.
    """

    def __init__(self, npus, latency_ns, bandwidth_bytes_per_ns, engine, path=None):
        self.npus_per_dim = [npus]  # one dimension: the kernel simulates npus ranks
        self.latency_ns = latency_ns
        self.bandwidth_bytes_per_ns = bandwidth_bytes_per_ns
        self.engine = engine
        self.path = path

    @classmethod
    def from_context(cls, context):
        """The factory registered with the kernel: ``factory(context) -> backend``."""
        npus, latency, bandwidth = parse_config(context.network_config_path)
        return cls(npus, latency, bandwidth, context.engine, context.network_config_path)

    def delay_ns(self, src, dst, size_bytes):
        """``latency_ns + ceil(size_bytes / bandwidth_bytes_per_ns)``, an int (any ``src``, ``dst``).

        Optional for a backend: the kernel's send/receive matcher uses a
        ``delay_ns(src, dst, size)`` method of a stateless network, when there is
        one, to schedule arrivals itself (one call less per message).
        """
        bandwidth = self.bandwidth_bytes_per_ns
        if isinstance(bandwidth, int):
            return self.latency_ns + -(-size_bytes // bandwidth)  # exact integer ceil
        return self.latency_ns + math.ceil(size_bytes / bandwidth)

    def send(self, src, dst, size, fn, arg):
        """Deliver ``size`` bytes from ``src`` to ``dst``: run ``fn(arg)`` when they arrive."""
        self.engine.schedule(self.delay_ns(src, dst, size), fn, arg)

    def describe(self):
        """What the report shows under ``settings.network``."""
        return {
            "backend": "constant",
            "npus": self.npus_per_dim[0],
            "latency_ns": self.latency_ns,
            "bandwidth_bytes_per_ns": self.bandwidth_bytes_per_ns,
        }
