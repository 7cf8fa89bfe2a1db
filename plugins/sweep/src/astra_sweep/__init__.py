"""astra-sweep: design-space exploration for astra-sim-py: ``astra sweep`` (a spec's points on a local process
pool or a Dask cluster, resumable, to Parquet or CSV) and ``astra search`` (every parallel layout of an LLM on N
GPUs, filtered by memory, simulated, ranked). The executors are the kernel's (:mod:`astra_sim.executors`; ``--dask``
is the astra-executor-dask plugin's).

From Python: ``SweepSpec(spec="sweep.yaml", output="rows.parquet").run()``, then ``read_results("rows.parquet")`` for
the rows as a pandas DataFrame."""

_PUBLIC = {"SweepSpec": "astra_sweep.sweep_spec", "read_results": "astra_sweep.sweep_spec",
           "run_sweep": "astra_sweep.sweep", "Executor": "astra_sim.executors", "ExecutorFailure": "astra_sim.executors",
           "LocalPool": "astra_sim.executors", "make_executor": "astra_sim.executors"}


def __getattr__(name):
    """The public names load on first use: loading the plugin (every ``astra`` command, every run) stays cheap."""
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_PUBLIC)
