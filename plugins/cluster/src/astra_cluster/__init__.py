"""astra-cluster: clusters as they are lived in: several jobs on one fabric (placement, scheduling, the links they
share), stragglers, failures, checkpoints and goodput over days (``astra cluster SPEC.yaml``).

From Python: ``run_cluster("cluster.yaml")`` gives the report as a dict (times in ns);
``load_cluster_spec(path)`` / ``parse_cluster_spec(mapping)`` read a spec; ``write_combined`` builds the combined
workload of placed jobs; ``daly_goodput`` / ``young_interval_ns`` are the checkpointing closed forms."""

_PUBLIC = {"run_cluster": "astra_cluster.cluster", "load_cluster_spec": "astra_cluster.spec",
           "parse_cluster_spec": "astra_cluster.spec", "ClusterSpec": "astra_cluster.spec",
           "write_combined": "astra_cluster.workloads", "daly_goodput": "astra_cluster.timeline",
           "young_interval_ns": "astra_cluster.timeline", "daly_interval_ns": "astra_cluster.timeline"}


def __getattr__(name):
    """The public names load on first use: loading the plugin (every ``astra`` command) stays cheap."""
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_PUBLIC)
