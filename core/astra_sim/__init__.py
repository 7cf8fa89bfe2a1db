"""astra-sim-py: a Python simulator of distributed machine-learning systems. The kernel owns the event engine, Chakra
I/O and the workload and system layers; every backend comes from a plugin (entry-point group ``astra_sim.plugins``)."""

__version__ = "0.1.0"

#: pluggy project name; every hook is called ``astra_*``.
PROJECT_NAME = "astra"


def simulate(*args, **kwargs):
    """Run one simulation and return its :class:`astra_sim.report.Report`, as ``astra run`` does to the ns.

    ``simulate(spec)`` runs a :class:`astra_sim.spec.RunSpec`; else the arguments are ``astra run``'s flags:
    ``simulate(workload, system, network, memory, comm_groups)``, or ``simulate(workload=PREFIX, platform="hgx-h100",
    nodes=2)``, plus any run option by name with its defaults (``gpu="B200"``, ``fold=False``). ``options={dest:
    value}`` is taken as is; ``plugins``/``block``/``extra_plugins``/``plugin_manager`` choose plugins;
    ``on_warning(message)`` sees each warning; ``measure_memory=True`` records peak Python memory."""
    from astra_sim.runner import make_spec, run_spec

    spec, pm, control = make_spec(args, kwargs)
    return run_spec(spec, pm, control.get("on_warning"), control.get("measure_memory", False))


def get_platform(name):
    """The registered platform ``name`` (:class:`astra_sim.platforms.Platform`; every installed plugin's)."""
    from astra_sim.platforms import get_platform as _get

    return _get(name)


def __getattr__(name):
    if name == "hookimpl":  # the marker of plugin hooks (``@hookimpl def astra_register_...``), made at first use:
        import pluggy  # ``astra --version`` does not import pluggy

        globals()["hookimpl"] = marker = pluggy.HookimplMarker(PROJECT_NAME)
        return marker
    if name in ("RunSpec", "ResolvedRun"):
        from astra_sim import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'astra_sim' has no attribute {name!r}")


__all__ = ["__version__", "hookimpl", "simulate", "get_platform", "RunSpec", "PROJECT_NAME"]
