"""The plugin's one hook: the ``dask`` executor (``--dask ADDRESS`` is ``--executor dask:ADDRESS``)."""

from astra_sim import hookimpl
from astra_sim.errors import ConfigError


def make_dask_executor(arg):
    """The executor factory: ``arg`` is the scheduler (``tcp://HOST:8786``) or ``local:N``."""
    if not arg:
        raise ConfigError("--executor dask: give the scheduler, dask:tcp://HOST:8786 or dask:local:N")
    from astra_executor_dask.executor import DaskExecutor

    return DaskExecutor(arg)


@hookimpl
def astra_register_executors(registry):
    registry.executor("dask", make_dask_executor,
                      "a Dask distributed cluster (dask:tcp://HOST:8786 or dask:local:N; --dask)")
