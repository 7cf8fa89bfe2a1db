"""Terminal tables that fit the terminal without cutting a number.

rich shrinks every column of a table wider than the terminal and ends what does not fit with an ellipsis
(``1,082,551,…``). Here numbers keep their full width, text wraps, and when the numbers alone do not fit whole columns
are left out, least important first, with a note. A broken pipe reaches the CLI (exit 141, no traceback).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Columns are left out before a text column gets narrower than its longest word (up to this; longer words fold).
TEXT_WORD_WIDTH = 24


@dataclass
class Column:
    """``number``: cells kept whole on one line; ``drop``: its rank in being left out (lowest first; None: never)."""

    header: str
    number: bool = False
    drop: int | None = None
    justify: str | None = None


def console(stderr=False):
    """A rich console raising :class:`BrokenPipeError` when its reader goes away (rich's exits 1 instead)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self):
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    return _Console(stderr=stderr)


def _min_width(column, cells):
    """The column's narrowest width without padding: a number's full width, a text's longest word."""
    if column.number:  # a header may be split over lines ("scale-up\nGB/s")
        return max([len(line) for line in column.header.splitlines()] + [len(c) for c in cells])
    longest = max([len(w) for c in [column.header, *cells] for w in c.split()] or [1])
    return min(longest, TEXT_WORD_WIDTH)


def table_width(columns, rows, keep):
    """The narrowest the table of columns ``keep`` can be without cutting a number or folding a word."""
    # rich's heavy box: a border before each column and one after the last, padding 1 + 1
    return sum(_min_width(columns[i], [row[i] for row in rows]) + 3 for i in keep) + 1


def fit_columns(columns, rows, width):
    """Indices of the columns to show so that the table fits ``width`` (or the ones never left out)."""
    keep = list(range(len(columns)))
    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop is not None)
    while table_width(columns, rows, keep) > width and droppable:
        keep.remove(droppable.pop(0)[1])
    return keep


def print_table(title, columns, rows, *, stderr=False, caption=None, out=None):
    """Print ``rows`` (lists of strings) under ``columns`` in a table no wider than the terminal."""
    from rich.table import Table

    out = out or console(stderr)
    rows = [[str(cell) for cell in row] for row in rows]
    keep = fit_columns(columns, rows, out.width)
    dropped = [columns[i].header.replace("/\n", "/").replace("\n", " ")
               for i in range(len(columns)) if i not in keep]
    notes = [caption] if caption else []
    if dropped:
        notes.append(f"left out to fit {out.width} columns: {', '.join(dropped)}")
    table = Table(title=title, caption="; ".join(notes) or None)
    for i in keep:
        column = columns[i]
        if column.number:
            width = _min_width(column, [row[i] for row in rows])
            table.add_column(column.header, justify=column.justify or "right", no_wrap=True, min_width=width)
        else:
            table.add_column(column.header, justify=column.justify or "left", overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    needed = table_width(columns, rows, keep)
    if needed > out.width:  # even the columns that are never left out are wider: wider lines, whole numbers
        out.print(table, width=needed, crop=False)
    else:
        out.print(table)
    return out
