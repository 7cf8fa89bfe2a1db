"""The result of a run: per-rank times (ns) plus the settings that produced them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from operator import attrgetter

from astra_sim.errors import ConfigError
from astra_sim.humanize import parse_rank_ranges, rank_ranges


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
    #: where the time went (``astra_analysis.breakdown``): parts adding up to ``finish_ns``, per-communicator times
    breakdown: dict | None = None


def _rank_dict(rank):
    """The rank as JSON (not a deep copy: ranks with equal breakdowns share one dict)."""
    out = {f.name: getattr(rank, f.name) for f in fields(rank)}
    if out["breakdown"] is None:
        del out["breakdown"]
    return out


#: what every report's numbers are in (JSON keeps integer ns everywhere; terminals show human units)
UNITS = {"time": "ns", "size": "bytes"}
#: a rank's numbers (every field but ``rank`` and ``breakdown``) as one tuple: with its breakdown's id, a record's key
_NUMBERS = attrgetter(*(f.name for f in fields(RankReport) if f.name not in ("rank", "breakdown")))


@dataclass
class Report:
    ranks: list
    settings: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    finish_order: list = field(default_factory=list)
    network_stats: dict = field(default_factory=dict)
    #: ``(logger, level, message)`` of every line the reference would print, in order (``--astra-sim-log``)
    astra_sim_log: list | None = None
    #: lines an output format has ``astra run`` print on stdout (the reference log's), the summary then on stderr
    stdout_lines: list | None = None
    #: every message left unmatched (``allow_unmatched``): src, dst, size, tag, kind, state, node/trace
    unmatched_messages: list = field(default_factory=list)
    #: False for the partial report of an interrupted run (``astra run --partial-report``)
    complete: bool = True
    #: the slowest rank's breakdown and the ranks grouped by identical breakdowns (None: not recorded)
    breakdown: dict | None = None
    #: the chain of nodes and waits that sets the last finish time (``critical_path=True``; astra-analysis)
    critical_path: dict | None = None
    #: the timeline files written (``timeline=PATH``; astra-analysis)
    timeline: dict | None = None
    #: what plugins add to the terminal summary (not the JSON): ``(title, columns, rows)`` tables after the rank
    #: table (:func:`astra_sim.termtable.print_table`), and lines at its end
    summary_tables: list = field(default_factory=list)
    summary_lines: list = field(default_factory=list)
    #: the summary's step time: notes after it (validation's 90 % interval), lines below it (an LLM's throughput)
    step_notes: list = field(default_factory=list)
    step_lines: list = field(default_factory=list)

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

    def to_dict(self, per_rank=True):
        """The report as JSON-ready data; ``per_rank=False``: the compact layout (``astra run``'s file), ranks with
        equal numbers (and per-rank ``stats`` tables) as ``rank_classes`` entries; :func:`read_report` reads both."""
        ranked = {"ranks": [_rank_dict(r) for r in self.ranks]} if per_rank else {"rank_classes": _classes(self.ranks)}
        out = {
            "units": UNITS,
            "layout": "per-rank" if per_rank else "rank-classes",
            "complete": self.complete,
            **ranked,
            "summary": {
                "npus": len(self.ranks),
                "max_finish_ns": self.max_finish_ns,
                "min_finish_ns": self.min_finish_ns,
                "max_exposed_comm_ns": self.max_exposed_comm_ns,
            },
            "settings": self.settings,
            "stats": self.stats if per_rank else _compact_stats(self.stats, self.ranks),
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
        """A pandas DataFrame, one row per rank of its numbers (integer ns)."""
        import pandas as pd  # imported only when a table is asked for: ``import astra_sim`` stays cheap

        columns = [f.name for f in fields(RankReport) if f.name != "breakdown"]
        return pd.DataFrame([[getattr(r, c) for c in columns] for r in self.ranks], columns=columns)

    def breakdown_frame(self):
        """Where each rank's time went: a row per (rank, part) with ``time_ns`` (empty without a breakdown)."""
        import pandas as pd

        rows = []
        for r in self.ranks:
            parts = (r.breakdown or {}).get("parts") or {}
            rows += [(r.rank, part, value) for part, value in parts.items()]
        return pd.DataFrame(rows, columns=["rank", "part", "time_ns"])

    def write_json(self, path, per_rank=True):
        """Write :meth:`to_dict` as JSON, atomically, creating the folder if needed."""
        from astra_sim.safeio import write_text_atomic

        write_text_atomic(path, json.dumps(self.to_dict(per_rank), indent=1) + "\n")


def _grouped(items):
    """``[(rank, value)]`` -> ``[(ranks, value)]``: equal values together, by first rank (an object compared once)."""
    by_key, by_id = {}, {}
    for rank, value in items:
        key = by_id.get(id(value))
        if key is None:
            key = by_id[id(value)] = json.dumps(value, sort_keys=True, default=str)
        entry = by_key.get(key)
        if entry is None:
            by_key[key] = ([rank], value)
        else:
            entry[0].append(rank)
    return list(by_key.values())


def _classes(ranks):
    """The compact layout's ``rank_classes``: one entry per distinct rank record, its ranks as ranges."""
    records, anonymous, made = [], {}, {}
    for rank in ranks:  # ranks with the same numbers and breakdown object: one record, built and serialised once
        key = (_NUMBERS(rank), id(rank.breakdown))
        record = made.get(key)
        if record is None:
            record = made[key] = _rank_dict(rank)
            del record["rank"]
            breakdown = record.get("breakdown")
            if breakdown is not None and breakdown.get("communicators"):
                # without the group ids, which differ from rank to rank, so that symmetric ranks share one entry
                shared = anonymous.get(id(breakdown))
                if shared is None:
                    shared = anonymous[id(breakdown)] = {**breakdown, "communicators": [
                        {k: v for k, v in c.items() if k != "groups"} for c in breakdown["communicators"]]}
                record["breakdown"] = shared
        records.append((rank.rank, record))
    return [{"ranks": rank_ranges(members), "count": len(members), **record}
            for members, record in _grouped(records)]


def _rank_table(value, rank_keys):
    """Whether ``value`` is a per-rank table: a mapping with one entry per rank of the run, keyed by rank."""
    return isinstance(value, dict) and len(value) == len(rank_keys) > 1 and {str(k) for k in value} == rank_keys


def _compact_stats(stats, ranks):
    """``stats`` with every per-rank table as ``{"rank_classes": [{"ranks": "0-7", "value": ...}]}``."""
    rank_keys = {str(r.rank) for r in ranks}
    out = {}
    for key, value in stats.items():
        if _rank_table(value, rank_keys):
            value = {"rank_classes": [{"ranks": rank_ranges(members), "value": shared}
                                      for members, shared in _grouped((int(k), v) for k, v in value.items())]}
        out[key] = value
    return out


def read_report(source, where=None):
    """A report's JSON (a path or the dict) in the per-rank layout, whichever layout it was written in."""
    where = where or (source if not isinstance(source, dict) else "the report")
    if not isinstance(source, dict):
        try:
            with open(source, encoding="utf-8") as handle:
                source = json.load(handle)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{where}: cannot read the report: {exc}") from None
        if not isinstance(source, dict):
            raise ConfigError(f"{where}: not an astra run report (JSON, but not an object)")
    if source.get("layout") != "rank-classes":
        return source
    classes = source.get("rank_classes")
    if not isinstance(classes, list) or not all(
            isinstance(c, dict) and isinstance(c.get("ranks"), str) and type(c.get("count")) is int and c["count"] > 0
            for c in classes):
        raise ConfigError(f"{where}: rank_classes must be a list of objects with 'ranks' (e.g. \"0-7\") and 'count'")
    total = sum(c["count"] for c in classes)

    def ranks_of(text, what):
        try:
            return parse_rank_ranges(text, total, what)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    ranks = []
    for entry in classes:
        record = {k: v for k, v in entry.items() if k not in ("ranks", "count")}
        members = ranks_of(entry["ranks"], "rank_classes")
        if len(members) != entry["count"]:
            raise ConfigError(f"{where}: rank_classes entry {entry['ranks']!r} has {len(members)} ranks, count says "
                              f"{entry['count']}")
        ranks += [{"rank": r, **record} for r in members]
    ranks.sort(key=lambda r: r["rank"])
    if [r["rank"] for r in ranks] != list(range(total)):
        raise ConfigError(f"{where}: rank_classes must name every rank 0-{total - 1} once")
    stats = {}
    for key, value in (source.get("stats") or {}).items():
        if isinstance(value, dict) and list(value) == ["rank_classes"] and isinstance(value["rank_classes"], list):
            table = {}
            for entry in value["rank_classes"]:
                if not isinstance(entry, dict) or not isinstance(entry.get("ranks"), str) or "value" not in entry:
                    raise ConfigError(f"{where}: stats.{key}.rank_classes entries need 'ranks' and 'value'")
                table.update((str(r), entry["value"]) for r in ranks_of(entry["ranks"], f"stats.{key}"))
            value = dict(sorted(table.items(), key=lambda kv: int(kv[0])))
        stats[key] = value
    out = {k: v for k, v in source.items() if k not in ("rank_classes", "layout", "units", "complete", "stats")}
    return {"units": source.get("units", UNITS), "layout": "per-rank", "complete": source.get("complete", True),
            "ranks": ranks, **out, "stats": stats}
