"""How the ``flow`` backend reads its configuration: which network file format, and its run options
(:meth:`astra_network_congestion.flow.FlowNetwork.from_context`)."""

from __future__ import annotations

from astra_sim.errors import ConfigError


def _is_analytical_yaml(path):
    """Whether the network file is the analytical YAML (top-level ``topology:`` and ``npus_count:``)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(1 << 16)
    except FileNotFoundError:
        raise ConfigError(f"network configuration file {path!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"network configuration file {path!r} is a directory") from None
    except UnicodeDecodeError:
        return False
    keys = set()
    for line in text.splitlines():
        if line[:1].isalpha():
            keys.add(line.split(":", 1)[0].strip())
    return "topology" in keys and "npus_count" in keys


def _options(options):
    """FlowNetwork keyword arguments from run options (``flow_ecmp``, ``flow_segment_bytes``, ...)."""
    out = {}
    for key, name in (("flow_ecmp", "ecmp"), ("flow_segment_bytes", "segment_bytes"),
                      ("flow_path_selection", "path_selection"), ("flow_max_paths", "max_paths")):
        value = options.get(key)
        if value is not None:
            out[name] = value
    return out
