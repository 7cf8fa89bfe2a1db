"""Plugin discovery (the ``astra_sim.plugins`` entry-point group), selection and the backend registry. Backends are
chosen by name per role; two plugins registering one name for a role is an error."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import zlib
from collections import namedtuple
from dataclasses import dataclass, field
from functools import partialmethod, reduce

import pluggy

from astra_sim import PROJECT_NAME, hookspecs, safeio
from astra_sim.errors import PluginError

#: Entry-point group every plugin distribution declares.
GROUP = "astra_sim.plugins"

#: Name of the kernel's own plugin (replay/roofline compute, Chakra format); it is always loaded.
BUILTIN = "builtin"

#: Plugins loaded whenever installed, even when ``-p`` names others (``-p no:NAME`` still blocks them): every
#: reference system config names the native collectives (groups fall back to their ring); folding is every run's fast
#: path (the same ns); analysis computes every breakdown; workload_compact reads what `astra workload llm` writes.
DEFAULT_PLUGINS = ("collectives_native", "folding", "analysis", "workload_compact")

ROLES = ("workload_format", "collective_algorithm", "compute_model", "network_backend", "memory_backend", "platform")
#: each role's registration hook: ``astra_register_<role>s``
_REGISTRATION_HOOKS = {role: f"astra_register_{role}s" for role in ROLES}


@dataclass
class Registration:
    """One named entry of a registry (a backend, a platform, an executor, an output format)."""

    role: str
    name: str
    factory: object
    plugin: str
    description: str = ""
    #: an output format's run options (astra_sim.outputs)
    options: tuple = ()


def register(entries, registration):
    """``entries[name] = registration``; an empty name, or one two plugins register, is a PluginError."""
    role, name, plugin = registration.role.replace("_", " "), registration.name, registration.plugin
    if not isinstance(name, str) or not name:
        raise PluginError(f"plugin {plugin!r} registered the {role} {name!r}: expected a non-empty name")
    if name in entries:
        raise PluginError(f"{role} {name!r} is registered by two plugins: {entries[name].plugin!r} and {plugin!r}; "
                          "block one with -p no:NAME")
    entries[name] = registration


@dataclass
class Registry:
    """Backends by role and name, filled by the registration hooks."""

    entries: dict = field(default_factory=lambda: {role: {} for role in ROLES})
    current_plugin: str = "?"

    def _add(self, role, name, factory, description=""):
        register(self.entries[role], Registration(role, name, factory, self.current_plugin, description))

    # ``registry.<role>(name, factory, description="")``, one per backend role
    workload_format = partialmethod(_add, "workload_format")
    collective_algorithm = partialmethod(_add, "collective_algorithm")
    compute_model = partialmethod(_add, "compute_model")
    network_backend = partialmethod(_add, "network_backend")
    memory_backend = partialmethod(_add, "memory_backend")

    def platform(self, platform, description=""):
        """A :class:`astra_sim.platforms.Platform` object, registered under its ``name``."""
        from astra_sim.platforms import Platform

        if not isinstance(platform, Platform):
            raise PluginError(f"plugin {self.current_plugin!r} registered {platform!r} as a platform; "
                              "expected an astra_sim.platforms.Platform")
        self._add("platform", str(platform.name).lower(), platform, description or platform.description)

    def get(self, role, name):
        """The registration for ``name``, or a PluginError listing what exists."""
        table = self.entries[role]
        if name not in table:
            known = ", ".join(sorted(table)) or "none (is the plugin installed and selected?)"
            raise PluginError(f"no {role.replace('_', ' ')} named {name!r}; available: {known}")
        return table[name]

    def names(self, role):
        return sorted(self.entries[role])


_ENTRY_POINTS = {}


PluginDist = namedtuple("PluginDist", "name version")  # the distribution declaring a plugin


class PluginEntry(namedtuple("PluginEntry", "name value dist")):
    """An entry point as kept on disk: loading it needs no ``importlib.metadata`` (importing it and scanning every
    distribution cost about 90 ms of each command's start-up). ``value``: "module" or "module:attribute"."""

    def load(self):
        module, _, attribute = self.value.partition(":")
        return reduce(getattr, filter(None, attribute.strip().split(".")), importlib.import_module(module.strip()))


def _entry_points():
    """The installed plugins' entry points, read again only when a ``sys.path`` folder but the current one ('': a
    script writes its files there) changed (an install does), here and on disk for the next process."""
    stamp = tuple((path, _mtime_ns(path)) for path in sys.path if path)
    if _ENTRY_POINTS.get("stamp") != stamp:
        _ENTRY_POINTS["points"] = _cached_entry_points(stamp)
        _ENTRY_POINTS["stamp"] = stamp
    return list(_ENTRY_POINTS["points"])


def _cached_entry_points(stamp):
    """From ``$XDG_CACHE_HOME/astra-sim/entry-points/`` (a file per Python environment) when written under ``stamp``,
    else from ``importlib.metadata`` and written there; ``ASTRA_CACHE=0`` reads the metadata every time."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(cache, "astra-sim", "entry-points", f"{zlib.crc32(sys.prefix.encode()):08x}.json")
    use = os.environ.get("ASTRA_CACHE") != "0"
    with contextlib.suppress(Exception):  # none written yet, or one this code cannot read
        kept = safeio.load_json(path) if use else {}
        if kept.get("stamp") == [list(item) for item in stamp]:
            return [PluginEntry(name, value, PluginDist(*dist)) for name, value, dist in kept["points"]]
    import importlib.metadata

    points = [PluginEntry(ep.name, ep.value, PluginDist(_dist(ep), _dist(ep, "version")))
              for ep in importlib.metadata.entry_points(group=GROUP)]
    with contextlib.suppress(Exception):  # a read-only home or a full disk costs only the cache
        if use:
            safeio.write_text_atomic(path, json.dumps({"stamp": stamp, "points": points}))
    return points


def _mtime_ns(path):
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return None


def available_plugins():
    """Installed plugin entry points, without importing them: name -> EntryPoint."""
    found = {}
    for ep in _entry_points():
        if ep.name in found:
            raise PluginError(f"plugin name {ep.name!r} is declared by two distributions: {_dist(found[ep.name])} "
                              f"and {_dist(ep)}")
        found[ep.name] = ep
    return found


def _dist(ep, field="name"):
    """The ``name`` or ``version`` of the distribution that declares ``ep`` ("?" when unknown)."""
    dist = getattr(ep, "dist", None)
    return getattr(dist, field) if dist is not None else "?"


def parse_plugin_args(values):
    """Split ``-p`` values into (selected names or None for all, blocked names)."""
    items = [item.strip() for value in values or () for item in str(value).split(",") if item.strip()]
    selected = [item for item in items if not item.startswith("no:")]
    blocked = [item[len("no:"):] for item in items if item.startswith("no:")]
    return (selected or None), blocked


def make_plugin_manager(select=None, block=(), extra_plugins=()):
    """A plugin manager with the builtin plugin and the chosen ones: ``select`` (None: every installed plugin;
    :data:`DEFAULT_PLUGINS` either way), less ``block`` (never imported), plus ``extra_plugins`` (objects, modules)."""
    from astra_sim import builtin

    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(builtin, name=BUILTIN)
    available = available_plugins()
    block = list(block)
    for name in block:
        if name == BUILTIN:
            raise PluginError("the kernel's builtin plugin cannot be blocked")
        pm.set_blocked(name)
    names = list(available) if select is None else [
        *(name for name in DEFAULT_PLUGINS if name in available and name not in select), *select]
    for name in names:
        if name == BUILTIN or name in block:
            continue
        ep = available.get(name)
        if ep is None:
            known = ", ".join(sorted(available)) or "none installed"
            raise PluginError(f"unknown plugin {name!r}; installed plugins: {known}")
        try:
            module = ep.load()
        except Exception as exc:  # a broken plugin must not look like a kernel crash
            raise PluginError(f"plugin {name!r} (distribution {_dist(ep)}, entry point {ep.value}) "
                              f"failed to import: {exc}; use -p no:{name} to skip it") from exc
        try:
            pm.register(module, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r} (distribution {_dist(ep)}) is invalid: {exc}; "
                              f"use -p no:{name} to skip it") from None
    try:
        for impl_plugin in list(extra_plugins):
            pm.register(impl_plugin)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = getattr(exc.plugin, "__name__", None) or type(exc.plugin).__name__
        raise PluginError(f"plugin {name} is invalid: {exc}") from None
    return pm


def call_registration_hook(pm, hook_name, registry):
    """Every plugin's ``hook_name(registry=...)``, one at a time, so that each entry is credited to its plugin."""
    caller = getattr(pm.hook, hook_name, None)
    for impl in (caller.get_hookimpls() if caller is not None else ()):
        registry.current_plugin = pm.get_name(impl.plugin) or repr(impl.plugin)
        impl.function(registry=registry)
    registry.current_plugin = "?"
    return registry


def registry_once(pm, attribute, make):
    """``make(pm)``, made once per plugin manager (kept on it as ``attribute``; None: the default one)."""
    pm = pm if pm is not None else default_plugin_manager()
    registry = getattr(pm, attribute, None)
    if registry is None:
        registry = make(pm)
        setattr(pm, attribute, registry)
    return registry


#: the roles a run's backends come from (a run built from a RunSpec has its platform resolved already)
BACKEND_ROLES = tuple(role for role in ROLES if role != "platform")


def build_registry(pm, roles=ROLES):
    """Call the registration hooks of ``roles``, one plugin at a time so entries are attributed."""
    registry = Registry()
    for role in roles:
        call_registration_hook(pm, _REGISTRATION_HOOKS[role], registry)
    return registry


_DEFAULT = {}


def default_plugin_manager():
    """The plugin manager of every installed plugin, shared instead of one per run; remade when they change."""
    key = tuple(sorted((ep.name, ep.value) for ep in _entry_points()))
    if _DEFAULT.get("key") != key:
        _DEFAULT["pm"] = make_plugin_manager()
        _DEFAULT["key"] = key
    return _DEFAULT["pm"]


def plugin_manager_for(plugins=None, block=(), extra_plugins=(), plugin_manager=None):
    """``plugin_manager``, else the shared default when no plugin is chosen, else a new one of the chosen plugins."""
    if plugin_manager is not None:
        return plugin_manager
    if plugins is None and not block and not extra_plugins:
        return default_plugin_manager()
    return make_plugin_manager(plugins, block or (), extra_plugins or ())


def registry_of(pm=None):
    """:func:`build_registry` of ``pm`` (default: :func:`default_plugin_manager`), built once per manager."""
    return registry_once(pm, "_astra_registry", build_registry)


def describe_plugins(pm=None):
    """Rows for ``astra plugins``: one per installed (or blocked) plugin and builtin."""
    available = available_plugins()
    if pm is None:
        pm = make_plugin_manager()
    registry = build_registry(pm)
    provided = {}
    for role in ROLES:
        for reg in registry.entries[role].values():
            provided.setdefault(reg.plugin, []).append(f"{role}:{reg.name}")
    from astra_sim.executors import executor_registry
    from astra_sim.metrics import metric_registry
    from astra_sim.outputs import output_registry

    for role, entries in (("output_format", output_registry(pm).entries), ("executor", executor_registry(pm).entries)):
        for name, reg in entries.items():
            provided.setdefault(reg.plugin, []).append(f"{role}:{name}")
    for key, metric in metric_registry(pm).entries.items():
        if metric.plugin != BUILTIN:  # the kernel's own schema is listed by `astra_sim.metrics`, not here
            provided.setdefault(metric.plugin, []).append(f"metric:{key}")
    from astra_sim import __version__

    def row(name, distribution, version, plugin, status):
        hooks = sorted(h.name for h in (pm.get_hookcallers(plugin) or ())) if plugin is not None else []
        return {"name": name, "distribution": distribution, "version": version, "hooks": hooks,
                "provides": sorted(provided.get(name, [])), "status": status}

    rows = [row(BUILTIN, "astra-sim", __version__, pm.get_plugin(BUILTIN), "loaded")]
    for name, ep in sorted(available.items()):
        plugin = pm.get_plugin(name)
        status = "blocked" if pm.is_blocked(name) else "not selected" if plugin is None else "loaded"
        rows.append(row(name, _dist(ep), _dist(ep, "version"), plugin, status))
    return rows
