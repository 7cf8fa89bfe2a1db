"""``--timeline PATH``: what to write, checked before the simulation starts, and written after it."""

from __future__ import annotations

import os
import tempfile

from astra_sim.errors import ConfigError

FORMATS = ("chrome", "kineto")


def check_writable_folder(folder, what):
    """Make ``folder`` (and its parents) and check a file can be created in it; a ConfigError names ``what``."""
    folder = os.path.abspath(os.fspath(folder))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot create the output folder {folder}: {exc.strerror or exc}") from None
    try:
        handle, probe = tempfile.mkstemp(prefix=".astra-probe-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write into the folder {folder}: {exc.strerror or exc}") from None


class TimelineRequest:
    """A timeline to write: ``chrome`` (one Chrome trace-event JSON, ``.json`` or ``.json.gz``) or
    ``kineto`` (a folder with one PyTorch-profiler-shaped trace per rank)."""

    def __init__(self, path, fmt, ranks, total):
        self.path = os.fspath(path)
        self.format = fmt
        self.ranks = ranks  # None: every rank
        self.total = total
        self.link_load = None  # a LinkLoad when the network backend records link use over time

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

    def prepare(self, run):
        """Before the run: ask a network backend with links to record their use over time."""
        record = getattr(run.network, "record_link_load", None)
        if record is not None:
            from astra_sim.analysis.links import LinkLoad

            self.link_load = LinkLoad()
            record(self.link_load)

    def write(self, analysis, report):
        if self.format == "chrome":
            from astra_sim.analysis.timeline import write_chrome_trace

            return write_chrome_trace(self, analysis, report)
        from astra_sim.analysis.kineto import write_kineto_traces

        return write_kineto_traces(self, analysis, report)
