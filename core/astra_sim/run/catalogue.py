"""The collective catalogue: the system config's implementation names (``all-reduce-implementation: [ring,
direct4]``, custom files, a per-node custom map) resolved against the registered algorithms once per run, for the
system layer and the fold planner."""

from __future__ import annotations

import math
import os

from astra_sim.config import COLLECTIVE_KEYS
from astra_sim.errors import ConfigError
from astra_sim.safeio import brief
from astra_sim.system.collectives import GROUP_FALLBACK_ALGORITHM
from astra_sim.workload.workload import _COLLECTIVES

#: Chakra comm_type value -> the system layer's collective name (for the system config's lists)
_COLLECTIVE_NAMES = dict(_COLLECTIVES)


class CollectiveCatalogue:
    """The run's collective algorithms, resolved lazily and cached (``config_path`` as the user named it)."""

    def __init__(self, registry, system_config, config_path, npus_per_dim, warn, context):
        self._entries = registry.entries["collective_algorithm"]
        self.system_config = system_config
        self.config_path = config_path
        self.npus_per_dim = list(npus_per_dim)
        self.total_npus = math.prod(self.npus_per_dim)
        self._warn = warn
        self._context = context
        self._impls = {}
        self._custom_loaded = {}
        self._per_node = None

    # ------------------------------------------------------------ native algorithms
    def algorithm_spec(self, name):
        """The registered algorithm for an implementation name, and its window (-1 = none)."""
        entries = self._entries
        if name in entries and entries[name].factory.topology == "custom":
            raise ConfigError(f"{self.config_path}: {name!r} is a custom collective format; "
                              "name its file in '*-implementation-custom' instead")
        if name in entries:
            return entries[name].factory, -1
        for base, reg in entries.items():
            suffix = name[len(base):]
            if reg.factory.takes_window and name.startswith(base) and suffix.isdigit():
                return reg.factory, int(suffix)
        known = ", ".join(sorted(entries)) or "none"
        hint = "" if GROUP_FALLBACK_ALGORITHM in entries else (
            f"; the native algorithms ({GROUP_FALLBACK_ALGORITHM}, direct, halvingDoubling, doubleBinaryTree, "
            "one*), which communicator groups fall back to, come from the collectives_native plugin: install the "
            "collectives_native plugin (pip install -e plugins/collectives_native) and do not pass "
            "-p no:collectives_native")
        raise ConfigError(f"{self.config_path}: unknown collective algorithm {name!r}; known: {known}{hint}")

    def native_impls(self, com_type):
        """``[(spec, window), ...]``: one per network dimension the collective type's list names."""
        impls = self._impls.get(com_type)
        if impls is not None:
            return impls
        cfg = self.system_config
        key = COLLECTIVE_KEYS[com_type]
        names = cfg.implementations.get(com_type)
        if not names:
            raise ConfigError(f"{cfg.path}: the workload has a {com_type.replace('_', '-')} but {key!r} is not set")
        if len(names) > len(self.npus_per_dim):
            raise ConfigError(f"{cfg.path}: {key!r} lists {len(names)} algorithms but the network has "
                              f"{len(self.npus_per_dim)} dimension(s); give at most one per dimension")
        impls = [self.algorithm_spec(name) for name in names]
        self._impls[com_type] = impls
        return impls

    def check_dimensions_covered(self, com_type, kinds):
        """Warn when a list shorter than the network's dimensions (no one* algorithm) runs a collective over all NPUs
        in the first dimensions only, as the reference does silently (a much shorter time)."""
        dims = self.npus_per_dim
        if len(kinds) >= len(dims) or "one" in kinds:
            return
        covered = math.prod(dims[:len(kinds)])
        key = COLLECTIVE_KEYS[com_type]
        names = self.system_config.implementations.get(com_type, [])
        which = "dimension 0" if len(kinds) == 1 else f"dimensions 0-{len(kinds) - 1}"
        example = names + [names[-1]] * (len(dims) - len(names))
        self._warn(f"{self.config_path}: {key!r} lists {len(kinds)} algorithm(s) for a {len(dims)}-dimensional "
                   f"network ({' x '.join(map(str, dims))} NPUs), so every {com_type.replace('_', '-')} over all NPUs "
                   f"runs in {which} only, among {covered} of the {self.total_npus} NPUs (as in the reference); "
                   f"list one per dimension, e.g. {example}, or a one* algorithm to span every NPU")

    def by_comm_type(self):
        """``native_impls`` and ``group_impl`` by Chakra comm_type (as the fold planner reads traces): the default
        group's list, and what a communicator group runs (the reference's fallback to ``ring`` for several)."""
        cfg = self.system_config

        def native_impls(comm_type):
            name = _COLLECTIVE_NAMES.get(comm_type)
            return self.native_impls(name) if name is not None and name in cfg.implementations else []

        def group_impl(comm_type):
            name = _COLLECTIVE_NAMES.get(comm_type)
            if name is None or name not in cfg.implementations:
                return None
            impls = self.native_impls(name)
            if len(impls) > 1 and not getattr(impls[0][0], "whole_group", False):
                return self.algorithm_spec(GROUP_FALLBACK_ALGORITHM)[0]
            return impls[0][0]

        return native_impls, group_impl

    # ------------------------------------------------------------ custom collectives
    @property
    def has_custom(self):
        """Whether the system config names any custom collective (such runs are not folded)."""
        cfg = self.system_config
        return bool(cfg.custom_implementations or cfg.per_node_custom_implementation)

    def custom_impl(self, com_type, node_id):
        """The node's custom collective (per-node map first, then per type), or None for the native ones."""
        path = self._per_node_custom().get(node_id)
        if path is None:
            path = self.system_config.custom_implementations.get(com_type)
            if path is None:
                return None
            path = self._custom_path(path)
        loaded = self._custom_loaded.get(path)
        if loaded is None:
            loaded = self._custom_loaded[path] = self._custom_format(path).load(path, self._context)
        return loaded

    def _custom_path(self, path):
        """Relative to the system config, then (like the reference) to the working directory."""
        if os.path.isabs(path):
            return path
        beside = os.path.join(self.system_config.base_dir, path)
        if _exists_as_file_or_prefix(beside) or not _exists_as_file_or_prefix(path):
            return beside
        return os.path.abspath(path)

    def _custom_format(self, path):
        for reg in self._entries.values():
            spec = reg.factory
            if spec.topology == "custom" and spec.factory.matches(path):
                return spec.factory
        known = [n for n, r in self._entries.items() if r.factory.topology == "custom"]
        installed = ", ".join(known) or "none; install plugins/collectives_msccl"
        raise ConfigError(f"{self.system_config.path}: no installed plugin reads the custom collective {path!r} "
                          f"(custom formats installed: {installed})")

    def _per_node_custom(self):
        if self._per_node is None:
            self._per_node = {}
            yaml_path = self.system_config.per_node_custom_implementation
            if yaml_path:
                from astra_sim.safeio import load_yaml

                yaml_path = self._custom_path(yaml_path)
                try:
                    data = load_yaml(yaml_path, "per-node custom implementation")
                except ConfigError as exc:
                    raise ConfigError(f"{self.system_config.path}: per-node-custom-implementation: {exc}") from None
                if not isinstance(data, dict):
                    raise ConfigError(f"{yaml_path}: must map workload node ids to custom collective paths")
                base = os.path.dirname(yaml_path)
                for node_id, path in data.items():
                    if not isinstance(node_id, int) or not isinstance(path, str):
                        raise ConfigError(f"{yaml_path}: entries must be <node id>: <path>, got {brief(node_id)}: "
                                          f"{brief(path)}")
                    self._per_node[node_id] = path if os.path.isabs(path) else os.path.join(base, path)
        return self._per_node


def _exists_as_file_or_prefix(path):
    return os.path.exists(path) or os.path.exists(f"{path}.0.et")
