"""The pieces of one run, tied together by :class:`astra_sim.simulation.Simulation`: ``build`` (inputs, backends,
then ranks), ``catalogue`` (which algorithm runs each collective), ``loop`` (the event loop and end-of-run checks),
``report`` and ``view`` (the read-only run the lifecycle hooks get). Folding is a plugin (``astra_fold_planner``).
"""
