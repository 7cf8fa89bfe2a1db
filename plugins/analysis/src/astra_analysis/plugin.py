"""The analysis plugin's hooks: ``astra run``'s output flags and the output formats that read them."""

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
