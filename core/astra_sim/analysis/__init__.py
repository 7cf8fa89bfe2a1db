"""Where the time goes: what every rank ran and when (recorded per node), and what is derived from it:
the per-rank breakdown, the critical path and the timelines (Chrome trace events, Kineto-shaped traces).

Only the class representatives of a folded run are simulated; every other rank's spans are its
representative's with peers and communicator groups relabelled (:class:`astra_sim.analysis.spans.RankView`),
so every result here holds for every rank.
"""
