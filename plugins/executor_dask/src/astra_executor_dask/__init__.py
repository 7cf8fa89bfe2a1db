"""The ``dask`` executor (:class:`astra_executor_dask.executor.DaskExecutor`): independent simulations (a sweep's
points, a search's candidates, validation cases) as tasks of a Dask distributed cluster, registered with the hook
``astra_register_executors`` (``--dask ADDRESS`` or ``--executor dask:ADDRESS``). Dask is imported only when one is
made, so loading the plugin costs nothing."""
