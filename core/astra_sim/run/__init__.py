"""The pieces of one simulation run (tied together by :class:`astra_sim.simulation.Simulation`):

* :mod:`~astra_sim.run.build`: registry resolution, configurations, backends, workload format
  (:class:`RunSetup`), then traces, system layers and workloads (:func:`build_ranks`);
* :mod:`~astra_sim.run.catalogue`: the collective catalogue (which algorithm runs each collective);
* :mod:`~astra_sim.run.loop`: the event loop and its end-of-run checks (deadlock, unmatched messages);
* :mod:`~astra_sim.run.report`: the report (settings, per-rank numbers, statistics, analyses);
* :mod:`~astra_sim.run.view`: :class:`RunView`, the read-only run the lifecycle hooks get.

Folding is a plugin (astra-folding), asked through the ``astra_fold_planner`` hook.
"""
