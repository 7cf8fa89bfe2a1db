"""The results file: one row per point, Parquet (pyarrow) or CSV by suffix, never left half-written.

Every finished point is appended at once to a journal beside it (``RESULTS.journal``, one JSON line, flushed
and fsynced); the results file is rewritten from all rows through a temporary file and a rename (at most once
a second while points stream in, and at the end), so a SIGKILL leaves the previous whole file and a journal
whose last line at worst is cut (ignored). A restarted sweep reads both and runs only the points missing.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import time

from astra_sim.errors import ConfigError

FORMATS = (".parquet", ".csv")


def results_format(path):
    for suffix in FORMATS:
        if str(path).endswith(suffix):
            return suffix
    raise ConfigError(f"-o {path}: the results file must end in .parquet or .csv")


@contextlib.contextmanager
def locked(path):
    """Hold ``RESULTS.lock`` (``fcntl.flock``, with this process's id inside) for the block: a second sweep writing
    the same results refuses with a one-line error instead of interleaving its rows. The holder removes the file;
    a process that locked a file already removed tries again (the lock is on the name, not on an old inode)."""
    from astra_sim.safeio import ensure_parent_dir

    lock_path = str(path) + ".lock"
    ensure_parent_dir(lock_path)
    while True:
        try:
            handle = open(lock_path, "a+", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"-o {path}: cannot create its lock file {lock_path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise ConfigError(f"-o {path}: another astra sweep (pid {holder}) is writing these results; wait for it "
                              f"to finish or stop it (its finished points are kept), or give another -o") from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()
    try:
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock_path)
        handle.close()


class Results:
    def __init__(self, path, columns, types):
        self.path = str(path)
        self.format = results_format(self.path)
        self.journal = self.path + ".journal"
        self.columns = list(columns)  # point, axes, results (more may appear: breakdown totals)
        self.types = dict(types)      # axis column -> "bool" | "int" | "float" | "str"
        self.rows = {}
        self._written = 0.0
        self._dirty = False

    # -------------------------------------------------------------------------------------------- resume
    def load(self, wanted):
        """Rows already computed for the point ids in ``wanted`` (the results file, then the journal)."""
        rows = []
        if os.path.exists(self.path):
            rows += self._read_results()
        if os.path.exists(self.journal):
            with open(self.journal, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:  # the line a kill cut short
                        continue
        for row in rows:
            if isinstance(row, dict) and row.get("point") in wanted:
                self.rows[row["point"]] = row
                self._extend(row)
        return dict(self.rows)

    def _read_results(self):
        if self.format == ".csv":
            with open(self.path, newline="", encoding="utf-8") as handle:
                return [self._typed(row) for row in csv.DictReader(handle)]
        import pyarrow.parquet as pq

        try:
            return pq.read_table(self.path).to_pylist()
        except Exception as exc:
            raise ConfigError(f"{self.path}: cannot read the earlier results to resume: {exc}") from None

    def _typed(self, row):
        out = {}
        for key, text in row.items():
            kind = self.types.get(key) or result_kind(key) or _infer(text)
            if text in ("", None):
                out[key] = None
            elif kind == "int":
                out[key] = int(text)
            elif kind == "float":
                out[key] = float(text)
            elif kind == "bool":
                out[key] = text == "True"
            else:
                out[key] = text
        return out

    # -------------------------------------------------------------------------------------------- writing
    def add(self, row):
        """Journal the row at once; rewrite the results file when the last rewrite is a second old."""
        self.rows[row["point"]] = row
        self._extend(row)
        with open(self.journal, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self._dirty = True
        if time.monotonic() - self._written >= 1.0:
            self.flush()

    def _extend(self, row):
        for key in row:
            if key not in self.columns:
                self.columns.insert(self.columns.index("status"), key)

    def flush(self, order=None):
        if not self._dirty and os.path.exists(self.path):
            return
        from astra_sim.safeio import write_bytes_atomic

        rows = [self.rows[p] for p in (order or self.rows) if p in self.rows]
        write_bytes_atomic(self.path, self._encode(rows))
        self._written = time.monotonic()
        self._dirty = False

    def finish(self, order):
        """The final file, rows in point order; the journal is no longer needed."""
        self._dirty = True
        self.flush(order)
        if os.path.exists(self.journal):
            os.remove(self.journal)

    def _encode(self, rows):
        if self.format == ".csv":
            out = io.StringIO()
            writer = csv.DictWriter(out, self.columns, extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in self.columns})
            return out.getvalue().encode()
        import pyarrow as pa
        import pyarrow.parquet as pq

        fields = []
        for name in self.columns:
            kind = self.types.get(name) or result_kind(name) or "int"
            fields.append(pa.field(name, {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(),
                                          "str": pa.string()}[kind]))
        schema = pa.schema(fields)
        table = pa.Table.from_pylist([{k: _cast(row.get(k), f.type) for k, f in zip(self.columns, fields)}
                                      for row in rows], schema=schema)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        return sink.getvalue().to_pybytes()


def _infer(text):
    """The type of a CSV cell whose column type is not known (an earlier run's axis column)."""
    if text in ("True", "False"):
        return "bool"
    for kind, convert in (("int", int), ("float", float)):
        try:
            convert(text)
            return kind
        except (TypeError, ValueError):
            pass
    return "str"


def _cast(value, kind):
    import pyarrow as pa

    if value is None:
        return None
    if kind == pa.string():
        return str(value)
    return value


#: result columns that are rates or fractions (floats); ``*_ns`` / ``*_bytes`` are integers
FLOAT_COLUMNS = ("wall_s", "mfu", "hfu", "slo_fraction")


def result_kind(name):
    """The type of a result column by its name (None: not known by name): ``*_ns``/``*_bytes``/``*_mj`` integers,
    rates (``*_per_s``, ``*_per_s_per_gpu``), powers (``*_power_w*``), energies per token and fractions floats,
    ``point``/``status``/``gpu_calibration`` text."""
    if name in ("point", "status", "gpu_calibration"):
        return "str"
    if name in FLOAT_COLUMNS or name.endswith(("_per_s", "_per_s_per_gpu", "_per_token_mj")) or "_power_w" in name:
        return "float"
    if name.endswith(("_ns", "_bytes", "_mj")):
        return "int"
    return None


def column_type(values):
    """The column type of an axis from its values: bool, int, float or str."""
    if all(isinstance(v, bool) for v in values):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float"
    return "str"
