"""astra-sim-py: a Python simulator of distributed machine-learning systems.

The kernel owns the event engine, the Chakra reader/writer, the workload layer
and the system layer; every network, memory and compute backend comes from a
plugin found through the ``astra_sim.plugins`` entry-point group.
"""

import pluggy

__version__ = "0.1.0"

#: pluggy project name; every hook is called ``astra_*``.
PROJECT_NAME = "astra"

#: Marker for plugin hook implementations: ``@hookimpl def astra_register_...``.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


def simulate(*args, **kwargs):
    """Run one simulation and return its :class:`astra_sim.report.Report`, exactly as ``astra run`` does.

    ``simulate(spec)`` runs a :class:`astra_sim.spec.RunSpec`; otherwise the arguments say the same as
    ``astra run``'s flags: ``simulate(workload, system, network, memory, comm_groups)`` for configuration files,
    or ``simulate(workload=PREFIX, platform="hgx-h100", nodes=2)`` for a registered platform, plus any run option
    by name (``network_backend="congestion"``, ``gpu="B200"``, ``host_launch_us=0``, ``fold=False``). Options
    take ``astra run``'s defaults, so the answer is the command line's to the ns. ``options={dest: value}``
    passes options as they are; ``plugins``/``block``/``extra_plugins``/``plugin_manager`` choose plugins;
    ``on_warning(message)`` sees each warning; ``measure_memory=True`` records peak Python memory.
    """
    from astra_sim.runner import make_spec, run_spec

    spec, pm, control = make_spec(args, kwargs)
    return run_spec(spec, pm, control.get("on_warning"), control.get("measure_memory", False))


def get_platform(name):
    """The registered platform ``name`` (:class:`astra_sim.platforms.Platform`; every installed plugin's)."""
    from astra_sim.platforms import get_platform as _get

    return _get(name)


def __getattr__(name):
    if name in ("RunSpec", "ResolvedRun"):
        from astra_sim import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'astra_sim' has no attribute {name!r}")


__all__ = ["__version__", "hookimpl", "simulate", "get_platform", "RunSpec", "PROJECT_NAME"]
