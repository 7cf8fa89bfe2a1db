"""Registers the ``ns3`` network backend and its run options (ns-3 is imported only when the backend is built)."""

from astra_sim import hookimpl


def _ns3(context):
    from astra_network_ns3.backend import Ns3Network

    return Ns3Network.from_context(context)


@hookimpl
def astra_register_network_backends(registry):
    registry.network_backend(
        "ns3",
        _ns3,
        "packet level on the real ns-3 (pip ns3): ASTRA-sim's network_cfg.txt + topology, TCP / DCTCP with RED/ECN",
    )


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("ns3 network backend (plugin network_ns3)")
    group.add_argument("--logical-topology-configuration", default=None, metavar="LOGICAL.json",
                       help="ASTRA-sim's logical topology ({\"logical-dims\": [...]}): the collective layer's "
                            "dimensions (default: one dimension of all NPUs)")
    group.add_argument("--ns3-fct-file", default=None, metavar="PATH",
                       help="write the reference's fct.txt (one line per message) to PATH")


@hookimpl
def astra_register_metrics(registry):
    """ns-3's network_stats (beyond the kernel's links.*.bytes/src/dst/...)."""
    for key, unit, what in (("slices", "count", "time slices ns-3 ran"), ("packets_sent", "count", "packets sent"),
                            ("drops", "count", "packets dropped"), ("cnps", "count", "DCQCN congestion notifications"),
                            ("ecn_marks", "count", "packets ECN-marked"),
                            ("flow_completion.count", "count", "flows completed"),
                            ("flow_completion.mean_ns", "ns", "mean flow completion time"),
                            ("flow_completion.p50_ns", "ns", "median flow completion time"),
                            ("flow_completion.p99_ns", "ns", "99th percentile flow completion time"),
                            ("flow_completion.max_ns", "ns", "longest flow completion time"),
                            ("links.*.bandwidth_bps", "bits_per_s", "the port's line rate"),
                            ("links.*.packets", "count", "packets the port sent"),
                            ("links.*.peak_queue_bytes", "bytes", "the port's peak queue"),
                            ("links.*.drops", "count", "packets the port dropped"),
                            ("links.*.ecn_marks", "count", "packets the port ECN-marked")):
        registry.metric(f"network_stats.{key}", unit, what)
