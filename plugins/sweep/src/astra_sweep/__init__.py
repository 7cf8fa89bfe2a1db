"""astra-sweep: design-space exploration for astra-sim-py: ``astra sweep`` (a spec's points on a local process
pool or a Dask cluster, resumable, to Parquet or CSV) and ``astra search`` (every parallel layout of an LLM on N
GPUs, filtered by memory, simulated, ranked). The executors are the kernel's (:mod:`astra_sim.executors`).

From Python: ``SweepSpec(spec="sweep.yaml", output="rows.parquet").run()``, then ``read_results("rows.parquet")`` for
the rows as a pandas DataFrame."""

from astra_sim.executors import DaskExecutor, Executor, ExecutorFailure, LocalPool, make_executor
from .sweep import run_sweep
from .sweep_spec import SweepSpec, read_results

__all__ = ["SweepSpec", "read_results", "run_sweep", "Executor", "ExecutorFailure", "LocalPool", "DaskExecutor",
           "make_executor"]
