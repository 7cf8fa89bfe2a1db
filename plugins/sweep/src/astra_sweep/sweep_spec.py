"""``SweepSpec``: one ``astra sweep`` as an object (the spec file, where its rows go, where its points run), with the
command's flags (:meth:`SweepSpec.add_cli_args`), so the command line and Python ask the same question. The spec
file's own contents (workload, run options, axes) are read by :mod:`astra_sweep.spec`; :meth:`SweepSpec.resolve`
gives its expanded points."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from astra_sim.errors import ConfigError


@dataclass
class SweepSpec:
    """``spec``: the sweep spec (YAML or JSON file); ``output``: the rows (.parquet or .csv, resumed when it exists);
    ``jobs`` / ``dask`` / ``executor``: where the points run (the kernel's executors); ``point_timeout``: seconds
    after which a point is an error row; ``retry_errors``: run error rows again; ``progress``: a progress bar (None:
    when stderr is a terminal)."""

    spec: str
    output: str
    jobs: int | None = None
    dask: str | None = None
    executor: str | None = None
    point_timeout: float | None = None
    retry_errors: bool = False
    progress: bool | None = None

    @staticmethod
    def add_cli_args(parser):
        from astra_sim.cliutil import add_executor_flags, positive_float

        parser.add_argument("spec", metavar="SPEC.yaml")
        parser.add_argument("-o", "--output", required=True, metavar="RESULTS", help="results file: .parquet or .csv")
        add_executor_flags(parser)  # --jobs N (default: one per core), --dask ADDRESS, --executor NAME[:ARG]
        parser.add_argument("--point-timeout", type=positive_float, default=None, metavar="S",
                            help="a point running longer is recorded as an error and the sweep goes on")
        parser.add_argument("--retry-errors", action="store_true", help="run again the points whose row is an error")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        return parser

    @classmethod
    def from_cli_args(cls, args) -> "SweepSpec":
        return cls(spec=args.spec, output=args.output, jobs=args.jobs, dask=args.dask, executor=args.executor,
                   point_timeout=args.point_timeout, retry_errors=args.retry_errors,
                   progress=False if args.no_progress else None)

    @classmethod
    def from_mapping(cls, mapping, where="sweep") -> "SweepSpec":
        """The spec of ``{field: value}`` (field names with dashes or underscores); an unknown key names ``where``."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {}
        for key, value in dict(mapping).items():
            name = str(key).replace("-", "_")
            if name not in names:
                from astra_sim.cliutil import did_you_mean

                hint = did_you_mean(name, names)
                raise ConfigError(f"{where}: unknown astra sweep option {key!r}{hint}")
            values[name] = value
        for required in ("spec", "output"):
            if required not in values:
                raise ConfigError(f"{where}: {required!r} is required")
        return cls(**values)

    def replace(self, **changes) -> "SweepSpec":
        return dataclasses.replace(self, **changes)

    def resolve(self):
        """The spec file read, checked and expanded: an :class:`astra_sweep.spec.Spec` (its ``points``, ``axes``)."""
        from .point import worker_state
        from .spec import load_spec

        if self.dask and self.executor:
            raise ConfigError("give --dask or --executor, not both")
        return load_spec(self.spec, worker_state()["parsers"])

    def run(self, executor_object=None) -> dict:
        """Run every missing point; the summary (counts, ``ran``, ``wall_s``, ``points_per_minute``, ``output``)."""
        from .sweep import run_sweep

        return run_sweep(self.spec, self.output, jobs=self.jobs, dask=self.dask, executor=self.executor,
                         point_timeout=self.point_timeout, retry_errors=self.retry_errors, progress=self.progress,
                         executor_object=executor_object)


def read_results(path):
    """A sweep's rows (its .parquet or .csv) as a pandas DataFrame: one row per point, its axes, ``step_ns`` and the
    other result columns (integer ns)."""
    import pandas as pd

    from .results import results_format

    if results_format(path) == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path)


__all__ = ["SweepSpec", "read_results"]
