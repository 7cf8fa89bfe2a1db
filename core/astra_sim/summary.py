"""The terminal summary of ``astra run``, one screen for people (JSON keeps integer ns): the ranks (identical ones
as one row, ``0-127 x128``), the tables, notes and lines plugins add (``report.summary_tables``, ``step_notes``,
``step_lines``, ``summary_lines``), the step time, the run's speed and whether it folded.
"""

from __future__ import annotations

from astra_sim.humanize import format_ns, rank_ranges
from astra_sim.termtable import Column, print_table

_RANK_FIELDS = ("finish_ns", "compute_ns", "exposed_comm_ns", "comm_ns", "cpu_ns")


def rank_rows(ranks):
    """Ranks with identical numbers as one row each: ``(ranks text, first RankReport)``, by first rank."""
    groups = {}
    for r in ranks:
        groups.setdefault(tuple(getattr(r, f) for f in _RANK_FIELDS), []).append(r)
    rows = []
    for members in sorted(groups.values(), key=lambda members: members[0].rank):
        count = f" x{len(members)}" if len(members) > 1 else ""
        rows.append((rank_ranges(r.rank for r in members) + count, members[0]))
    return rows


def print_summary(report, max_rows, stderr=False):
    ranks = report.ranks
    rows = rank_rows(ranks)
    columns = [Column("ranks"), Column("finish", number=True), Column("compute", number=True, drop=3),
               Column("exposed\ncomm", number=True), Column("comm", number=True, drop=2),
               Column("cpu", number=True, drop=1)]
    cells = [[text, format_ns(r.finish_ns), format_ns(r.compute_ns), format_ns(r.exposed_comm_ns),
              format_ns(r.comm_ns), format_ns(r.cpu_ns)] for text, r in rows[:max_rows]]
    more = len(rows) - max_rows
    caption = (f"{more} more rows not listed (--max-table-ranks; every rank in --report-json)"
               if more > 0 else None)
    simulated = report.stats.get("simulated_ranks", len(ranks))
    title = f"astra-sim-py: {len(ranks):,} NPU{'' if len(ranks) == 1 else 's'}"
    if simulated < len(ranks):
        title += f" ({simulated:,} simulated)"
    console = print_table(title, columns, cells, stderr=stderr, caption=caption)
    for title, table_columns, table_rows in report.summary_tables:  # plugins' (the breakdown's, the critical path's)
        print_table(title, table_columns, table_rows, stderr=stderr, out=console)
    stats = report.stats
    slowest = max(ranks, key=lambda r: r.finish_ns) if ranks else None
    console.print(
        f"step time {format_ns(report.max_finish_ns)}" + "".join(f" ({note})" for note in report.step_notes)
        + (f" (rank {slowest.rank})" if slowest is not None and len(ranks) > 1 else "")
        + f", fastest rank {format_ns(report.min_finish_ns)}, max exposed communication "
        f"{format_ns(report.max_exposed_comm_ns)} | {stats.get('events', 0):,} events in "
        f"{stats.get('run_s', 0):.3f} s", highlight=False)
    for line in report.step_lines:  # a plugin's (an LLM step's throughput)
        console.print(line, highlight=False)
    for key, value in stats.items():  # a plugin's own line (e.g. the energy plugin's stats.energy.summary_line)
        if isinstance(value, dict) and isinstance(value.get("summary_line"), str):
            console.print(value["summary_line"], highlight=False)
    fold = report.settings.get("fold") or {}
    if simulated < len(ranks):
        console.print(f"simulated {simulated:,} of {len(ranks):,} ranks (symmetric ranks folded; "
                      "--no-fold simulates all)", highlight=False)
    elif fold.get("requested") and fold.get("reason") and len(ranks) > 1:
        console.print(f"all {len(ranks):,} ranks simulated: {fold['reason']}", highlight=False)
    for line in report.summary_lines:  # an output format's (the timeline's files)
        console.print(line, highlight=False)
    return console
