"""What every case study shares: its command line, its sweeps, its figure and the check of its headline ratio.

A study (``examples/case-studies/<name>/run.py``) asks one published question with the public API: it builds
``astra sweep`` specs (:func:`sweep` runs them through ``astra_sweep.SweepSpec``), reads one headline ratio from
the rows, draws the figure ``astra plot RESULTS.csv`` draws (:func:`draw`) and compares the ratio with the
study's committed ``expected.json`` (:func:`check`): ``{"headline": what the ratio is, "tolerance": relative,
"full": {"ratio": ...}, "small": {"ratio": ...}, "paper": {"ratio": ..., "source": ...}}``. ``--small`` is the
form CI runs (tests/test_case_studies.py); the full form is what the README's numbers come from.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

try:
    import astra_sim  # noqa: F401
except ImportError:  # run outside the project's environment: say how to run it, not a traceback
    raise SystemExit("astra-sim-py is not installed in this Python; run `make install`, then use .venv/bin/python") \
        from None

from astra_sim.errors import ConfigError
from astra_sim.safeio import atomic_output, load_json, write_text_atomic


def parse_args(argv, doc):
    """``--small`` (the CI form), ``--out DIR`` (results and figures; default a temporary folder), ``--jobs N``."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the reduced form CI runs (under 2 minutes on 2 cores)")
    parser.add_argument("--out", default=None, metavar="DIR", help="folder for the sweep specs, results and figures")
    parser.add_argument("--jobs", type=int, default=2, metavar="N", help="sweep worker processes (default 2)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: expected a whole number of at least 1, got {args.jobs}")
    args.out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="astra-case-study-"))
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def sweep(spec, out, name, jobs):
    """Run the sweep ``spec`` (a mapping, as an ``astra sweep`` YAML holds it) into ``out/<name>.csv``; its
    ``(axes, rows)`` (every value a string, as the results file holds it). A point that failed is an error."""
    import yaml
    from astra_plots.inputs import read_sweep_results
    from astra_sweep import SweepSpec

    spec_path = out / f"{name}.yaml"
    results = out / f"{name}.csv"
    write_text_atomic(spec_path, yaml.safe_dump(spec, sort_keys=False))
    if results.exists():  # a study asks its question afresh: no rows resumed from an earlier run
        results.unlink()
    SweepSpec(spec=str(spec_path), output=str(results), jobs=jobs, progress=False).run()
    axes, rows = read_sweep_results(results)
    failed = [row for row in rows if row.get("status") != "ok"]
    if failed:
        raise ConfigError(f"{results}: {len(failed)} point(s) did not finish, e.g. {failed[0].get('status')}")
    return axes, rows


def step_ns(rows, where):
    """``step_ns`` of the one row whose axes have the values of ``where`` (``{"run.network-backend": "flow",
    "system.all-reduce-implementation": ["ring", "ring"]}``: lists as lists, compared as the text the results
    file holds)."""
    wanted = {axis: [str(v) for v in value] if isinstance(value, list) else str(value) for axis, value in where.items()}
    match = [row for row in rows if all(_axis_value(row, axis) == value for axis, value in wanted.items())]
    if len(match) != 1:
        raise ConfigError(f"case study: {len(match)} rows match {where} (expected exactly one)")
    return int(match[0]["step_ns"])


def _axis_value(row, axis):
    """An axis's value in a row as the spec wrote it: ``"['ring', 'ring']"`` -> ``["ring", "ring"]``."""
    if axis not in row:
        raise ConfigError(f"case study: no axis {axis!r} in the results (columns: {sorted(row)})")
    text = row[axis]
    if text.startswith("[") and text.endswith("]"):
        return [value.strip().strip("'\"") for value in text[1:-1].split(",")]
    return text


def draw(axes, rows, path, title, log=False):
    """The figure ``astra plot RESULTS.csv`` draws (step time of every point, grouped by the axes), to ``path``;
    ``log``: a logarithmic time axis, for times that span decades (message sizes)."""
    import matplotlib.pyplot as plt
    from astra_plots import figures

    fig = figures.sweep_results_figure(axes, rows, title)
    if log:
        fig.axes[0].set_yscale("log")
    with atomic_output(str(path)) as handle:
        fig.savefig(handle, format="png")
    plt.close(fig)
    return path


def check(study_dir, small, ratio, out):
    """Compare ``ratio`` with the study's ``expected.json`` (the ``small`` or ``full`` entry, within its relative
    ``tolerance``); write ``out/ours.json``; print the line and return 0 when it holds, 1 when not."""
    expected = load_json(Path(study_dir) / "expected.json", "a case study's expected ratio")
    form = "small" if small else "full"
    want = float(expected[form]["ratio"])
    tolerance = float(expected["tolerance"])
    ok = abs(ratio - want) <= tolerance * want
    write_text_atomic(out / "ours.json", json.dumps({"form": form, "headline": expected["headline"],
                                                      "ratio": round(ratio, 4), "expected": want,
                                                      "tolerance": tolerance, "ok": ok}, indent=1) + "\n")
    paper = expected.get("paper", {})
    print(f"{expected['headline']} ({form}): ours {ratio:.2f}x, expected {want:.2f}x +- {tolerance:.0%}"
          f"{'' if ok else ' - OUTSIDE THE TOLERANCE'}; the paper's: {paper.get('ratio') or 'not stated'}")
    return 0 if ok else 1


def ms(ns):
    """A table cell: integer ns shown in ms."""
    return f"{int(ns) / 1e6:.3f}"
