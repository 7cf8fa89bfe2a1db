"""The output formats this plugin registers (:mod:`astra_sim.outputs`): each reads its run options, checks what
it will write before the run starts, and fills its part of the report after the last event.

* ``timeline`` (``--timeline PATH``, ``--timeline-format``, ``--timeline-ranks``): Chrome trace events or
  Kineto-shaped traces (:mod:`astra_analysis.timeline`, :mod:`astra_analysis.kineto`), with link-load counter
  tracks from a backend that records link use (:mod:`astra_analysis.links`);
* ``critical_path`` (``--critical-path``): :mod:`astra_analysis.critical_path`;
* ``astra_sim_log`` (``--astra-sim-log``): the reference simulator's stdout (:mod:`astra_analysis.reference_log`).
"""

from __future__ import annotations

import os
import time

from astra_analysis.views import analysis_of
from astra_sim.api import link_load_recorder
from astra_sim.errors import ConfigError
from astra_sim.outputs import OutputFormat, check_writable_folder

FORMATS = ("chrome", "kineto")
TIMELINE_OPTIONS = ("timeline", "timeline_format", "timeline_ranks")


class TimelineRequest(OutputFormat):
    """A timeline to write: ``chrome`` (one Chrome trace-event JSON, ``.json`` or ``.json.gz``) or
    ``kineto`` (a folder with one PyTorch-profiler-shaped trace per rank)."""

    def __init__(self, path, fmt, ranks, total):
        self.path = os.fspath(path)
        self.format = fmt
        self.ranks = ranks  # None: every rank
        self.total = total
        self.link_load = None  # a LinkLoad when the network backend records link use over time

    @classmethod
    def from_options(cls, options, total):
        """The output format factory: None without ``--timeline``."""
        return cls.make(options.get("timeline"), options.get("timeline_format"), options.get("timeline_ranks"),
                        total)

    @classmethod
    def make(cls, path, fmt, ranks, total):
        """None without a path; otherwise a request whose output place is known to be writable (ConfigError)."""
        if path is None:
            if ranks is not None:
                raise ConfigError("--timeline-ranks needs --timeline PATH")
            return None
        fmt = fmt or "chrome"
        if fmt not in FORMATS:
            raise ConfigError(f"--timeline-format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if isinstance(ranks, str):
            from astra_sim.humanize import parse_rank_ranges

            try:
                ranks = parse_rank_ranges(ranks, total)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        elif ranks is not None:
            ranks = sorted(set(int(r) for r in ranks))
            bad = [r for r in ranks if not 0 <= r < total]
            if bad:
                raise ConfigError(f"--timeline-ranks: rank {bad[0]} does not exist (the run has ranks 0-{total - 1})")
        path = os.fspath(path)
        if fmt == "chrome":
            if not (path.endswith(".json") or path.endswith(".json.gz")):
                raise ConfigError(f"--timeline {path}: the file name must end in .json or .json.gz "
                                  "(or give --timeline-format kineto and a folder)")
            if os.path.isdir(path):
                raise ConfigError(f"--timeline {path}: is a folder, not a file")
            check_writable_folder(os.path.dirname(os.path.abspath(path)), f"--timeline {path}")
        else:
            if os.path.exists(path) and not os.path.isdir(path):
                raise ConfigError(f"--timeline {path}: --timeline-format kineto writes a folder, and this is a file")
            check_writable_folder(path, f"--timeline {path}")
        return cls(path, fmt, ranks, total)

    def written_ranks(self):
        return range(self.total) if self.ranks is None else self.ranks

    def start(self, run):
        """Before the run: ask for the spans, and a network backend with links to record their use over time."""
        run.record_spans()
        record = link_load_recorder(run.network)
        if record is not None:
            from astra_analysis.links import LinkLoad

            self.link_load = LinkLoad()
            record(self.link_load)

    def finish(self, run, report):
        started = time.perf_counter()
        # the energy plugin's per-class watts, for the timeline's power lane (None: no power data)
        self.power_w = (getattr(run, "plugin_state", None) or {}).get("energy", {}).get("op_class_power_w")
        try:
            report.timeline = self.write(analysis_of(run), report)
        except OSError as exc:  # a full disk: a one-line error; the atomic writer left no partial file
            raise ConfigError(f"--timeline {self.path}: cannot write: {exc.strerror or exc}") from None
        report.stats["timeline_s"] = round(time.perf_counter() - started, 6)
        info = report.timeline
        report.summary_lines.append(f"timeline: {info['path']} ({info['format']}, {info['ranks_written']:,} ranks, "
                                    f"{info['events']:,} events)")
        if self.link_load is not None and self.link_load.bins:
            from astra_analysis.links import utilisation_summary

            report.network_stats["link_utilisation"] = utilisation_summary(self.link_load, report.max_finish_ns)

    def write(self, analysis, report):
        if self.format == "chrome":
            from astra_analysis.timeline import write_chrome_trace

            return write_chrome_trace(self, analysis, report)
        from astra_analysis.kineto import write_kineto_traces

        return write_kineto_traces(self, analysis, report)


class CriticalPathRequest(OutputFormat):
    """``--critical-path``: the report's ``critical_path`` from the recorded spans."""

    @classmethod
    def from_options(cls, options, total):
        return cls() if options.get("critical_path") else None

    def start(self, run):
        run.record_spans()

    def finish(self, run, report):
        from astra_analysis.critical_path import critical_path, summary_table

        started = time.perf_counter()
        report.critical_path = critical_path(analysis_of(run), report)
        if report.critical_path:
            report.summary_tables.append(summary_table(report.critical_path))
        report.stats["analysis_s"] = round(report.stats.get("analysis_s", 0) + time.perf_counter() - started, 6)


class ReferenceLogRequest(OutputFormat):
    """``--astra-sim-log``: the report's ``astra_sim_log`` and, spdlog's prefixes added, its ``stdout_lines``
    (what ``astra run`` prints on stdout)."""

    needs_every_rank = "not folded: --astra-sim-log prints every rank's own statistics"

    def __init__(self):
        self.log = None

    @classmethod
    def from_options(cls, options, total):
        return cls() if options.get("astra_sim_log") else None

    def start(self, run):
        from astra_analysis.reference_log import ReferenceLog

        self.log = ReferenceLog(run)

    def finish(self, run, report):
        from astra_analysis.reference_log import log_lines

        report.astra_sim_log = self.log.records(report.ranks, report.finish_order)
        report.stdout_lines = log_lines(report, prefixed=True)


__all__ = ["TimelineRequest", "CriticalPathRequest", "ReferenceLogRequest", "TIMELINE_OPTIONS", "FORMATS"]
