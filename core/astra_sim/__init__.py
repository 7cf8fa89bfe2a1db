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
    """Run one simulation and return its :class:`astra_sim.report.Report`.

    Same arguments as :func:`astra_sim.simulation.simulate`; imported lazily so
    that ``import astra_sim`` stays cheap for plugins.
    """
    from astra_sim.simulation import simulate as _simulate

    return _simulate(*args, **kwargs)


__all__ = ["__version__", "hookimpl", "simulate", "PROJECT_NAME"]
