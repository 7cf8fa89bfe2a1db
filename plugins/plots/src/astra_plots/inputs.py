"""Reading what ``astra plot`` draws: run reports (``--report-json``) and Chrome timelines (``--timeline``).

Every problem is a :class:`~astra_sim.errors.ConfigError` that names the file (exit 2).
"""

from __future__ import annotations

import gzip
import json

from astra_sim.errors import ConfigError


def read_report(path):
    """A run report as a dict; a ConfigError when the file is not one."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the report: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        raise ConfigError(f"{path}: not an astra run report (a gzip file; a timeline goes after --timeline)")
    try:
        report = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{path}: not an astra run report (not JSON; write one with astra run --report-json)") from None
    if isinstance(report, dict) and report.get("layout") == "rank-classes":  # astra run's default, compact file
        from astra_sim.report import read_report

        report = read_report(report, where=path)
    if not isinstance(report, dict) or not isinstance(report.get("ranks"), list) or "summary" not in report:
        what = "a Chrome timeline" if isinstance(report, dict) and "traceEvents" in report else "JSON without 'ranks' and 'summary'"
        raise ConfigError(f"{path}: not an astra run report ({what}; write one with astra run --report-json)")
    return report


def read_json_or_none(path):
    """The JSON in ``path``, or None when it cannot be read or is not JSON (another reader then names the problem):
    how a kind of report is recognised before it is read as one."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _open(path):
    with open(path, "rb") as probe:
        magic = probe.read(2)
    return gzip.open(path, "rt", encoding="utf-8") if magic == b"\x1f\x8b" else open(path, encoding="utf-8")


class Timeline:
    """The parts of a Chrome timeline the plots use: complete events of some ranks, thread names, counters."""

    def __init__(self):
        self.events = []  # (pid, tid, ts_us, dur_us, cat, name, communicator or None, op class or None)
        self.threads = {}  # (pid, tid) -> name
        self.counters = {}  # counter name -> [(ts_us, value)]
        self.pids = set()


def read_timeline(path, ranks=None):
    """Read ``path`` (``.json`` or ``.json.gz``) keeping complete events of ``ranks`` (all when None). astra's
    writer puts one event per line, which is read line by line; other files are read whole."""
    timeline = Timeline()
    wanted = None if ranks is None else set(ranks)
    try:
        with _open(path) as handle:
            first = handle.readline()
            if not first.startswith("{") :
                raise ValueError("not a JSON object")
            lines = 0
            for line in handle:
                line = line.strip().rstrip(",")
                if not line.startswith('{"ph"'):
                    continue
                lines += 1
                _keep(timeline, json.loads(line), wanted)
        if not lines:  # not astra's layout: the whole document
            with _open(path) as handle:
                data = json.load(handle)
            events = data.get("traceEvents") if isinstance(data, dict) else data
            if not isinstance(events, list):
                raise ValueError("no traceEvents")
            for event in events:
                if isinstance(event, dict):
                    _keep(timeline, event, wanted)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the timeline: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError, EOFError) as exc:
        raise ConfigError(f"{path}: not a Chrome trace-event timeline ({exc})") from None
    return timeline


def _keep(timeline, event, wanted):
    ph = event.get("ph")
    pid = event.get("pid")
    if ph == "X":
        timeline.pids.add(pid)
        if wanted is None or pid in wanted:
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            timeline.events.append((pid, event.get("tid"), float(event.get("ts", 0)), float(event.get("dur", 0)),
                                    event.get("cat", ""), event.get("name", ""), _text(args.get("communicator")),
                                    _text(args.get("op_class"))))
    elif ph == "M" and event.get("name") == "thread_name":
        timeline.threads[(pid, event.get("tid"))] = (event.get("args") or {}).get("name", "")
    elif ph == "C":
        for value in (event.get("args") or {}).values():
            timeline.counters.setdefault(event.get("name", ""), []).append((float(event.get("ts", 0)), float(value)))


def _text(value):
    return value if isinstance(value, str) else None


def read_sweep_results(path):
    """``(axes, rows)`` of an ``astra sweep`` results file (.csv or .parquet): the axis columns (those between
    ``point`` and ``step_ns``) and every row as a dict of strings; a ConfigError when it is not one."""
    path = str(path)
    try:
        if path.endswith(".parquet"):
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise ConfigError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
            table = pq.read_table(path)
            columns = list(table.column_names)
            rows = [{k: "" if v is None else str(v) for k, v in row.items()} for row in table.to_pylist()]
        else:
            import csv

            with open(path, newline="") as handle:
                reader = csv.DictReader(handle)
                columns = list(reader.fieldnames or [])
                rows = list(reader)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the sweep results: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - a damaged Parquet/CSV file: say which
        raise ConfigError(f"{path}: not readable as sweep results: {type(exc).__name__}: {exc}") from None
    if not columns or columns[0] != "point" or "step_ns" not in columns or "status" not in columns:
        raise ConfigError(f"{path}: not astra sweep results (expected the columns point, <axes>, step_ns, ..., "
                          "status; write them with astra sweep -o)")
    return columns[1:columns.index("step_ns")], rows
