"""The analysis plugin's hooks: the report's breakdown, ``astra run``'s output flags and the output formats that read
them."""

from astra_sim import hookimpl


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("analyses and outputs (astra-analysis)")
    group.add_argument("--astra-sim-log", action="store_true",
                       help="also print the reference's 'sys[i] finished, T cycles, ...' lines")
    group.add_argument("--timeline", metavar="PATH",
                       help="write the run as Chrome trace events (PATH.json or PATH.json.gz; Perfetto, "
                            "chrome://tracing), or with --timeline-format kineto a folder of per-rank traces")
    group.add_argument("--timeline-format", choices=("chrome", "kineto"), default="chrome",
                       help="chrome (default): one trace-event file; kineto: one PyTorch-profiler-shaped trace per "
                            "rank (HolisticTraceAnalysis reads the folder)")
    group.add_argument("--timeline-ranks", metavar="RANGES",
                       help="ranks the timeline holds, e.g. 0-7,64 (default: all)")
    group.add_argument("--critical-path", action="store_true",
                       help="report the chain of nodes and waits that sets the last finish time")


@hookimpl
def astra_register_output_formats(registry):
    from astra_analysis.output import (
        TIMELINE_OPTIONS, CriticalPathRequest, ReferenceLogRequest, TimelineRequest,
    )

    registry.output_format("timeline", TimelineRequest.from_options, options=TIMELINE_OPTIONS,
                           description="Chrome trace events or Kineto traces of every rank (--timeline PATH)")
    registry.output_format("critical_path", CriticalPathRequest.from_options, options=("critical_path",),
                           description="the chain of nodes and waits that sets the last finish time")
    registry.output_format("astra_sim_log", ReferenceLogRequest.from_options, options=("astra_sim_log",),
                           description="the reference simulator's stdout, line for line (--astra-sim-log)")


@hookimpl
def astra_run_start(run):
    """The breakdown reads the spans: ask for them when the run wants one (a run records none unless asked)."""
    if run.wants_breakdown:
        run.record_spans()


@hookimpl
def astra_report_breakdown(run, report):
    """Every rank's breakdown, the report's summary of it (:mod:`astra_analysis.breakdown`) and its table in ``astra
    run``'s terminal summary."""
    from astra_analysis.breakdown import breakdowns, summary, summary_table
    from astra_analysis.views import analysis_of

    per_rank = breakdowns(analysis_of(run))
    for rank, result in zip(report.ranks, per_rank):
        rank.breakdown = result
    report.breakdown = summary(per_rank, [r.finish_ns for r in report.ranks])
    if report.breakdown:
        report.summary_tables.append(summary_table(report))
    return True


@hookimpl
def astra_register_metrics(registry):
    """The numbers the analyses add to the report (the breakdown, critical path, timeline files, link utilisation)."""
    for key, unit, what in (
            ("ranks.*.breakdown.parts.*", "ns", "where the rank's time went: parts that add up to its finish"),
            ("ranks.*.breakdown.comm_busy_ns", "ns", "time any communication of the rank was in flight"),
            ("ranks.*.breakdown.comm_overlapped_ns", "ns", "communication time hidden behind compute"),
            ("ranks.*.breakdown.communicators.*.busy_ns", "ns", "time the communicator's operations were in flight"),
            ("ranks.*.breakdown.communicators.*.exposed_ns", "ns", "the communicator's time not hidden behind compute"),
            ("ranks.*.breakdown.communicators.*.overlapped_ns", "ns", "the communicator's time hidden behind compute"),
            ("ranks.*.breakdown.communicators.*.recv_wait_ns", "ns", "time waiting for the communicator's receives"),
            ("ranks.*.breakdown.communicators.*.groups.*", "id", "the communicator's group ids"),
            ("breakdown.slowest_rank", "id", "the rank whose breakdown the summary shows"),
            ("breakdown.finish_ns", "ns", "the slowest rank's finish"),
            ("breakdown.parts.*", "ns", "where the slowest rank's time went"),
            ("breakdown.comm_busy_ns", "ns", "the slowest rank's communication busy time"),
            ("breakdown.comm_overlapped_ns", "ns", "the slowest rank's communication hidden behind compute"),
            ("breakdown.communicators.*.busy_ns", "ns", "per communicator: in flight"),
            ("breakdown.communicators.*.exposed_ns", "ns", "per communicator: not hidden"),
            ("breakdown.communicators.*.overlapped_ns", "ns", "per communicator: hidden behind compute"),
            ("breakdown.communicators.*.recv_wait_ns", "ns", "per communicator: waiting for receives"),
            ("breakdown.communicators.*.groups.*", "id", "per communicator: its group ids"),
            ("breakdown.rank_groups.*.count", "count", "ranks with this breakdown"),
            ("breakdown.rank_groups.*.finish_ns", "ns", "their finish"),
            ("breakdown.rank_groups.*.parts.*", "ns", "their parts"),
            ("critical_path.rank", "id", "the rank that finishes last (where the path ends)"),
            ("critical_path.length_ns", "ns", "the path's length: that rank's finish"),
            ("critical_path.ranks_visited", "count", "ranks the path crosses"),
            ("critical_path.items.*.rank", "id", "a step of the path: its rank"),
            ("critical_path.items.*.from_rank", "id", "a message step: the sending rank"),
            ("critical_path.items.*.node_id", "id", "a step's trace node"),
            ("critical_path.items.*.start_ns", "ns", "a step's start"),
            ("critical_path.items.*.end_ns", "ns", "a step's end"),
            ("critical_path.totals.*", "ns", "the path's time by kind (compute class, collective, message, wait)"),
            ("critical_path.by_kind.*.ns", "ns", "the path's time by kind (compute by op class, communication by "
             "communicator, receive waits, host launch)"),
            ("critical_path.by_kind.*.share", "fraction", "that kind's share of the path"),
            ("critical_path.by_layer.*.ns", "ns", "the path's time by layer (from the node names; embedding, head, "
             "optimizer, other)"),
            ("critical_path.by_layer.*.share", "fraction", "that layer's share of the path"),
            ("critical_path.top.*.ns", "ns", "the path's largest contributors"),
            ("critical_path.top.*.share", "fraction", "a contributor's share of the path"),
            ("timeline.events", "count", "trace events the timeline holds"),
            ("timeline.flows", "count", "send-to-receive arrows"),
            ("timeline.link_counters", "count", "link-utilisation counter tracks"),
            ("timeline.power_counters", "count", "power counter tracks (one per rank, with the energy plugin)"),
            ("timeline.ranks_written", "count", "ranks the timeline holds"),
            ("timeline.bytes", "bytes", "size of the timeline file(s)"),
            ("stats.timeline_s", "s", "wall-clock time to write the timeline"),
            ("network_stats.link_utilisation.bin_ns", "ns", "the utilisation series' bin width"),
            ("network_stats.link_utilisation.links.*.link", "id", "a link of the series"),
            ("network_stats.link_utilisation.links.*.utilisation.*", "fraction", "its utilisation per bin")):
        registry.metric(key, unit, what)
