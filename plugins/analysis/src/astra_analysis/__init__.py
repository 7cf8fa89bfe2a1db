"""Analyses and outputs of a run beyond the kernel's report: Chrome and Kineto timelines (with link load), the
critical path and the reference simulator's log, registered as output formats (``astra_register_output_formats``).

They read the spans the kernel records when this plugin asks (:mod:`astra_sim.spans`, ``run.record_spans()``) through
:mod:`astra_analysis.views` (every rank's spans, the folded ranks' relabelled from their representative's), so every
result holds for every rank of a folded run.
"""
