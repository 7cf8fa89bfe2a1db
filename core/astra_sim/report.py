"""The result of a run: per-rank times (ns) plus the settings that produced them."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields


@dataclass
class RankReport:
    """One rank. ``exposed_comm_ns`` = finish - GPU compute, like the reference."""

    rank: int
    finish_ns: int
    compute_ns: int
    exposed_comm_ns: int
    cpu_ns: int
    comm_ns: int
    nodes: int
    #: where the time went (``astra_sim.analysis.breakdown``): parts adding up to ``finish_ns``, per
    #: communicator busy/overlapped/exposed times; None when the run did not record spans
    breakdown: dict | None = None


def _rank_dict(rank):
    """The rank as JSON (not a deep copy: ranks with equal breakdowns share one dict)."""
    out = {f.name: getattr(rank, f.name) for f in fields(rank)}
    if out["breakdown"] is None:
        del out["breakdown"]
    return out


#: what every report's numbers are in (JSON keeps integer ns everywhere; terminals show human units)
UNITS = {"time": "ns", "size": "bytes"}


@dataclass
class Report:
    ranks: list
    settings: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    finish_order: list = field(default_factory=list)
    network_stats: dict = field(default_factory=dict)
    #: ``(logger, level, message)`` for every line the reference would print, in its order; None
    #: unless the run collected them (``astra_sim_log=True``, ``astra run --astra-sim-log``: the
    #: astra-analysis plugin's reference log; ``astra run`` then prints them on stdout).
    astra_sim_log: list | None = None
    #: every message left unmatched at the end (only a run with ``allow_unmatched`` gets a report
    #: with any): dicts with src, dst, size, tag, kind, state and, for trace nodes, node/trace
    unmatched_messages: list = field(default_factory=list)
    #: False for the partial report of an interrupted run (``astra run --partial-report``)
    complete: bool = True
    #: the slowest rank's breakdown and the ranks grouped by identical breakdowns (None: not recorded)
    breakdown: dict | None = None
    #: the chain of nodes and waits that sets the last finish time (``critical_path=True``; astra-analysis)
    critical_path: dict | None = None
    #: the timeline files written (``timeline=PATH``; astra-analysis)
    timeline: dict | None = None

    # (a partial report's ranks still running have None; the summary counts the finished ones)
    @property
    def max_finish_ns(self):
        return max((r.finish_ns for r in self.ranks if r.finish_ns is not None), default=0)

    @property
    def min_finish_ns(self):
        return min((r.finish_ns for r in self.ranks if r.finish_ns is not None), default=0)

    @property
    def max_exposed_comm_ns(self):
        return max((r.exposed_comm_ns for r in self.ranks if r.exposed_comm_ns is not None), default=0)

    def to_dict(self):
        out = {
            "units": UNITS,
            "complete": self.complete,
            "ranks": [_rank_dict(r) for r in self.ranks],
            "summary": {
                "npus": len(self.ranks),
                "max_finish_ns": self.max_finish_ns,
                "min_finish_ns": self.min_finish_ns,
                "max_exposed_comm_ns": self.max_exposed_comm_ns,
            },
            "settings": self.settings,
            "stats": self.stats,
            "network_stats": self.network_stats,
            "unmatched_messages": list(self.unmatched_messages),
            "warnings": list(self.warnings),
        }
        for key in ("breakdown", "critical_path", "timeline"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    # ------------------------------------------------------------------ tables
    def ranks_frame(self):
        """One row per rank: rank, finish_ns, compute_ns, exposed_comm_ns, cpu_ns, comm_ns, nodes (a pandas DataFrame,
        integer ns)."""
        pd = _pandas()
        columns = [f.name for f in fields(RankReport) if f.name != "breakdown"]
        return pd.DataFrame([[getattr(r, c) for c in columns] for r in self.ranks], columns=columns)

    def breakdown_frame(self):
        """Where each rank's time went: one row per (rank, part) with ``time_ns`` (parts add up to the rank's
        finish_ns); empty when the run recorded no breakdown."""
        pd = _pandas()
        rows = []
        for r in self.ranks:
            parts = (r.breakdown or {}).get("parts") or {}
            rows += [(r.rank, part, value) for part, value in parts.items()]
        return pd.DataFrame(rows, columns=["rank", "part", "time_ns"])

    def write_json(self, path):
        """Write :meth:`to_dict` as JSON, atomically, creating the folder if needed."""
        from astra_sim.safeio import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")

    def astra_sim_log_lines(self, prefixed=False):
        """The reference's stdout lines for this run.

        With the full log collected (``astra_sim_log=True``): every line the reference prints
        (rings, ``sys[i] finished``, statistics, ``Exiting``); ``prefixed`` adds spdlog's
        ``[time] [logger] [level] `` prefixes, as the reference prints them. Otherwise only the
        ``sys[i] finished, ...`` lines, in the order ranks finished.

        The reference prints exposed communication as an unsigned 64-bit number, so a negative
        value (possible with ``replay-only``, where overlapping communication counts as compute)
        wraps around; these lines do the same so scripts that parse them see identical text. The
        report itself keeps the signed value.
        """
        if self.astra_sim_log is not None:
            if not prefixed:
                return [message for _, _, message in self.astra_sim_log]
            now = time.time()
            return [spdlog_line(logger, level, message, now) for logger, level, message in self.astra_sim_log]
        by_rank = {r.rank: r for r in self.ranks}
        lines = []
        for rank in self.finish_order:
            r = by_rank[rank]
            exposed = r.exposed_comm_ns % (1 << 64)
            lines.append(f"sys[{r.rank}] finished, {r.finish_ns} cycles, exposed communication {exposed} cycles.")
        return lines


def spdlog_line(logger, level, message, now=None):
    """``message`` behind spdlog's default prefixes: ``[date time.ms] [logger] [level] ``."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    return f"[{stamp}.{int(now * 1000) % 1000:03d}] [{logger}] [{level}] {message}"


def _pandas():
    """pandas, imported only when a table is asked for (``import astra_sim`` stays cheap)."""
    try:
        import pandas
    except ImportError:  # pragma: no cover - a kernel dependency
        from astra_sim.errors import AstraError

        raise AstraError("results as tables need pandas (pip install pandas)") from None
    return pandas
