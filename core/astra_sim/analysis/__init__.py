"""Where the time goes: what every rank ran and when (recorded per node), and the per-rank breakdown derived from
it (the report's anatomy). The optional analyses built on the same spans (critical path, Chrome and Kineto
timelines, link load) are output formats of the analysis plugin (``plugins/analysis``).

Only the class representatives of a folded run are simulated; every other rank's spans are its
representative's with peers and communicator groups relabelled (:class:`astra_sim.analysis.spans.RankView`),
so every result here holds for every rank.
"""
