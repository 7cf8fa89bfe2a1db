"""What every rank ran and when: the spans recorded per node (:mod:`astra_sim.analysis.spans`), and views of any
rank over them. What is derived from them is the analysis plugin's (``plugins/analysis``): the report's breakdown
(the hook ``astra_report_breakdown``) and the output formats (critical path, Chrome and Kineto timelines, link
load).

Only the class representatives of a folded run are simulated; every other rank's spans are its
representative's with peers and communicator groups relabelled (:class:`astra_sim.analysis.spans.RankView`),
so every result derived from them holds for every rank.
"""
