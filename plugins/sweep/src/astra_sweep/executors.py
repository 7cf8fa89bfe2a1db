"""The executors live in the kernel (:mod:`astra_sim.executors`, hook ``astra_register_executors``); this module
only keeps the old import path working for callers not yet moved (``astra_validation``)."""

from astra_sim.executors import DaskExecutor, Executor, ExecutorFailure, LocalPool, make_executor

__all__ = ["Executor", "ExecutorFailure", "LocalPool", "DaskExecutor", "make_executor"]
