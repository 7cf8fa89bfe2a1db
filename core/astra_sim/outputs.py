"""Output formats (timelines, the critical path, the reference's log), one registered role: each run calls every
``factory(options, total_npus)`` before it is built, so that an unwritable output fails before any event. The
registered ``options`` make ``simulate(timeline=...)`` without the plugin reading them an error, not a missing file.
"""

from __future__ import annotations

import os
import tempfile

from astra_sim.errors import ConfigError, PluginError


class OutputFormat:
    """One requested output of one run; override what you need. ``needs_every_rank``: None, or why the run must not
    fold. :meth:`start` runs before the first event (add observers, ``run.record_spans()``), :meth:`finish` after the
    last event and checks, before ``astra_run_finish`` (write files, add report keys)."""

    needs_every_rank = None

    def start(self, run):
        """``run`` is the read-only :class:`astra_sim.run.view.RunView`."""

    def finish(self, run, report):
        """Write the output; add what it says to ``report``."""


class OutputRegistry:
    """Output formats by name, filled by ``astra_register_output_formats``."""

    def __init__(self):
        self.entries = {}
        self.current_plugin = "?"

    def output_format(self, name, factory, options=(), description=""):
        """``factory(options, total_npus)`` -> an :class:`OutputFormat` or None; ``options``: the dests it reads."""
        if not callable(factory):
            raise PluginError(f"plugin {self.current_plugin!r} registered output format {name!r} with {factory!r}; "
                              "expected a callable factory(options, total_npus)")
        from astra_sim.plugins import Registration, register

        register(self.entries, Registration("output_format", name, factory, self.current_plugin, description,
                                            tuple(options)))

    def names(self):
        return sorted(self.entries)

    def option_names(self):
        """Every run option some registered format reads."""
        return {option for reg in self.entries.values() for option in reg.options}

    def requested(self, options, total_npus):
        """``[(name, OutputFormat)]`` the options ask for, in name order (ConfigErrors: before the run)."""
        made = [(name, self.entries[name].factory(options, total_npus)) for name in sorted(self.entries)]
        return [(name, output) for name, output in made if output is not None]


def output_registry(pm) -> OutputRegistry:
    """Every output format of ``pm``, built once per plugin manager (entries attributed to their plugin)."""
    from astra_sim.plugins import call_registration_hook, registry_once

    return registry_once(pm, "_astra_outputs",
                         lambda pm: call_registration_hook(pm, "astra_register_output_formats", OutputRegistry()))


def output_formats(pm=None) -> dict:
    """``{name: description}`` of every registered output format."""
    return {name: reg.description for name, reg in sorted(output_registry(pm).entries.items())}


def check_writable_folder(folder, what):
    """Make ``folder`` and check a file can be created there on a disk not full, else a ConfigError naming ``what``
    (checked before the run, so that a typo does not cost a whole simulation)."""
    folder = os.path.abspath(os.fspath(folder))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot create the output folder {folder}: {exc.strerror or exc}") from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".astra-probe-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write into the folder {folder}: {exc.strerror or exc}") from None
    try:
        space = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs here: the write itself will say
        return
    if space.f_bavail == 0:
        raise ConfigError(f"{what}: the folder {folder} is on a full disk (no free space left)")
