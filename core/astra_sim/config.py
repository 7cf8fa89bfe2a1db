"""Parsing of the system, remote-memory and communicator-group JSON, with the reference's keys and units (existing
configs work unchanged); values are stored under names that say their unit. Unknown keys are ignored as by the
reference, but listed in ``SystemConfig.ignored_keys`` for the report."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field

from astra_sim.errors import ConfigError
from astra_sim.limits import check_number
from astra_sim.safeio import brief, load_json

COLLECTIVE_KEYS = {
    "all_reduce": "all-reduce-implementation",
    "all_gather": "all-gather-implementation",
    "reduce_scatter": "reduce-scatter-implementation",
    "all_to_all": "all-to-all-implementation",
}

#: Keys the reference parses (plus ones it documents but ignores).
KNOWN_SYSTEM_KEYS = {
    "scheduling-policy", "collective-optimization", "local-reduction-delay",
    "active-chunks-per-dimension", "L", "o", "g", "G", "endpoint-delay",
    "model-shared-bus", "preferred-dataset-splits", "peak-perf", "local-mem-bw",
    "roofline-enabled", "trace-enabled", "replay-only", "track-local-mem",
    "local-mem-trace-filename", "per-node-custom-implementation",
    *COLLECTIVE_KEYS.values(), *(k + "-custom" for k in COLLECTIVE_KEYS.values()),
    # Not the reference's: collectives' logical dimensions on a graph network (InfraGraph), and how many
    # communication operations a rank runs at once.
    "logical-dims", "comm-streams",
}
#: ``comm-streams`` values: the reference's one in-flight communication operation per NPU, or one per
#: communicator (collectives of different groups, and sends to different peers, overlap).
COMM_STREAMS = ("single", "per-communicator")
#: Keys found in shipped configs that the reference silently ignores.
IGNORED_BY_REFERENCE = {
    "boost-mode", "intra-dimension-scheduling", "inter-dimension-scheduling",
    "direct-collective-window",
}


def _number(path, data, key, default, *, integer=False):
    """A numeric key within its range (``astra_sim.limits``); ``integer`` truncates it (the reference's ints)."""
    if key not in data:
        return default
    value = check_number(path, key, data[key])
    return int(value) if integer else value


def _choice(path, data, key, allowed, default):
    """A key whose value is one of ``allowed`` (``default`` when absent)."""
    value = data.get(key, default)
    if value not in allowed:
        raise ConfigError(f"{path}: {key!r} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {brief(value)}")
    return value


def _flag(path, data, key):
    value = data.get(key, False)
    if isinstance(value, (bool, int, float)):
        return value != 0
    raise ConfigError(f"{path}: key {key!r} must be 0 or 1, got {brief(value)}")


@dataclass
class SystemConfig:
    """The system layer's settings, units in the names."""

    path: str = "<defaults>"
    scheduling_policy: str = "LIFO"
    collective_optimization: str = "baseline"
    endpoint_delay_ns: int = 10
    active_chunks_per_dimension: int = 1
    preferred_dataset_splits: int = 0
    local_mem_bw_bytes_per_s: float = 0.0
    peak_perf_flops: float = 0.0
    roofline_enabled: bool = False
    replay_only: bool = False
    comm_streams: str = "single"
    implementations: dict = field(default_factory=dict)
    custom_implementations: dict = field(default_factory=dict)
    per_node_custom_implementation: str | None = None
    ignored_keys: list = field(default_factory=list)
    raw: dict = field(default_factory=dict)

    @property
    def base_dir(self):
        return os.path.dirname(os.path.abspath(self.path)) if self.path != "<defaults>" else os.getcwd()


def parse_system_config(path, injection_scale=1.0, data=None):
    """Parse a reference-style system JSON (``data`` skips reading ``path``)."""
    if data is None:
        data = load_json(path, "system configuration")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the system configuration must be a JSON object")
    cfg = SystemConfig(path=str(path), raw=data)
    cfg.scheduling_policy = _choice(path, data, "scheduling-policy", ("LIFO", "FIFO", "EXPLICIT"), "LIFO")
    cfg.collective_optimization = _choice(path, data, "collective-optimization", ("baseline", "localBWAware"),
                                          "baseline")
    cfg.active_chunks_per_dimension = _number(path, data, "active-chunks-per-dimension", 1, integer=True)
    endpoint = _number(path, data, "endpoint-delay", 10, integer=True)
    # The reference stores int(int(endpoint-delay) * injection-scale).
    cfg.endpoint_delay_ns = int(endpoint * injection_scale)
    if cfg.endpoint_delay_ns < 0:
        raise ConfigError(f"{path}: endpoint-delay x --injection-scale must be >= 0")
    cfg.preferred_dataset_splits = _number(path, data, "preferred-dataset-splits", 0, integer=True)
    cfg.local_mem_bw_bytes_per_s = float(_number(path, data, "local-mem-bw", 0)) * 1e9
    cfg.peak_perf_flops = float(_number(path, data, "peak-perf", 0)) * 1e12
    for key in ("local-reduction-delay", "L", "o", "g", "G"):  # read by the reference's shared-bus model only
        _number(path, data, key, 0)
    cfg.roofline_enabled = _flag(path, data, "roofline-enabled")
    cfg.replay_only = _flag(path, data, "replay-only")
    cfg.comm_streams = _choice(path, data, "comm-streams", COMM_STREAMS, "single")
    if _flag(path, data, "model-shared-bus"):
        raise ConfigError(f"{path}: 'model-shared-bus: 1' (the LogGP shared-bus model) is not supported; set it to 0")
    for com_type, key in COLLECTIVE_KEYS.items():
        if key in data:
            value = data[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
                raise ConfigError(f"{path}: {key!r} must be a non-empty list of algorithm names, got {brief(value)}")
            cfg.implementations[com_type] = list(value)
        custom_key = key + "-custom"
        if custom_key in data:
            value = data[custom_key]
            if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], str):
                raise ConfigError(f"{path}: {custom_key!r} must be a list with exactly one path, got {brief(value)}")
            cfg.custom_implementations[com_type] = value[0]
    if "per-node-custom-implementation" in data:
        cfg.per_node_custom_implementation = str(data["per-node-custom-implementation"])
    cfg.ignored_keys = sorted(k for k in data if k not in KNOWN_SYSTEM_KEYS)
    return cfg


def ignored_key_messages(cfg):
    """A warning per system key nothing reads: those the reference ignores, and unknown ones (often a misspelt key,
    which would silently keep its default)."""
    out = []
    for key in cfg.ignored_keys:
        if key in IGNORED_BY_REFERENCE:
            out.append(f"{cfg.path}: key {key!r} has no effect: the reference ignores it too")
            continue
        close = difflib.get_close_matches(key, sorted(KNOWN_SYSTEM_KEYS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        out.append(f"{cfg.path}: key {key!r} is not a system configuration key and is ignored{hint}")
    return out


def parse_comm_groups(path):
    """``{"<id>": [npu, ...]}`` -> {int id: [npus]}; None when disabled (a path with ``empty``, as in the reference)."""
    if path is None or "empty" in str(path):
        return None
    data = load_json(path, "communicator-group configuration")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a JSON object mapping group ids to lists of NPU ids")
    groups = {}
    for key, members in data.items():
        try:
            group_id = int(key)
        except ValueError:
            raise ConfigError(f"{path}: group id {key!r} is not an integer") from None
        if group_id <= 0:
            raise ConfigError(f"{path}: group id {key!r} must be > 0 (0 is the default all-NPU group)")
        if not isinstance(members, list) or not members or any(type(m) is not int for m in members):
            raise ConfigError(f"{path}: group {key!r} must be a non-empty list of NPU ids, got {brief(members)}")
        if len(set(members)) != len(members):
            raise ConfigError(f"{path}: group {key!r} lists an NPU twice: {brief(members)}")
        groups[group_id] = list(members)
    return groups


def parse_memory_config(path):
    """The remote-memory JSON as a dict (backends interpret its keys)."""
    if path is None:
        return {"memory-type": "NO_MEMORY_EXPANSION"}
    data = load_json(path, "remote-memory configuration")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the remote-memory configuration must be a JSON object")
    return data


def default_system_config(dims=1, algorithm="ring", **overrides):
    """The reference's usual system configuration (shared/parity/configs/sys_ring_1d.json) with ``algorithm`` on
    ``dims`` dimensions for every collective (what platforms start from); overrides take underscores: local_mem_bw."""
    config = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4,
        "collective-optimization": "localBWAware",
        "local-mem-bw": 1600,
        "roofline-enabled": 0,
        "peak-perf": 900,
    }
    for key in COLLECTIVE_KEYS.values():
        config[key] = [algorithm] * dims
    for key, value in overrides.items():
        config[key.replace("_", "-")] = value
    return config
