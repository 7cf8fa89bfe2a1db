"""Registers the ``congestion`` and ``flow`` network backends (imported only when used)."""

from astra_sim import hookimpl


def _congestion(context):
    from astra_network_congestion.congestion import CongestionNetwork

    return CongestionNetwork.from_context(context)


def _flow(context):
    from astra_network_congestion.flow import FlowNetwork

    return FlowNetwork.from_context(context)


@hookimpl
def astra_register_network_backends(registry):
    registry.network_backend(
        "congestion",
        _congestion,
        "the reference's congestion-aware model: directed links, FIFO queues, store-and-forward per hop",
    )
    registry.network_backend(
        "flow",
        _flow,
        "flow-level model on arbitrary graphs / InfraGraph: max-min fair sharing, ECMP, per-hop latency",
    )


@hookimpl
def astra_register_commands(subparsers):
    from astra_network_congestion.commands import register

    register(subparsers)


def _fabric_spec(text):
    """``--fabric``'s value, checked when the command line is read (kept as the string)."""
    import argparse

    from astra_sim.errors import ConfigError
    from astra_network_congestion.fabrics import parse_fabric

    try:
        parse_fabric(text, "--fabric")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


@hookimpl
def astra_add_run_options(parser):
    group = parser.add_argument_group("flow network backend (plugin network_congestion)")
    group.add_argument("--flow-ecmp", choices=("hash", "split"), default=None,
                       help="equal-cost paths: one per message by a fixed hash (default), or split evenly")
    group.add_argument("--flow-segment-bytes", type=int, default=None, metavar="BYTES",
                       help="store-and-forward the first BYTES of a message at every hop (default: cut-through)")
    group.add_argument("--flow-path-selection", choices=("widest", "all"), default=None,
                       help="among fewest-hop paths keep the widest (default) or all")
    group.add_argument("--flow-max-paths", type=int, default=None, metavar="N",
                       help="at most N equal-cost paths per pair (default 64)")
    group.add_argument("--fabric", default=None, metavar="SPEC", type=_fabric_spec,
                       help="flow/congestion: build the scale-out as a fabric, e.g. rail:nodes_per_leaf=16:over=2 or "
                            "planes:planes=2:nic_gbps=800 (keys nodes_per_leaf, over, nic_gbps, planes, spines; "
                            "docs/hardware.md); the analytical backend ignores it")


@hookimpl
def astra_register_metrics(registry):
    """The congestion and flow backends' network_stats (beyond the kernel's links.*.bytes/busy_ns/...)."""
    for key, unit, what in (
            ("links_total", "count", "links in the graph"), ("links_used", "count", "links that carried data"),
            ("switches", "count", "switches in the graph"), ("bytes_on_links", "bytes", "bytes over all links"),
            ("flows", "count", "flows started (flow)"), ("recomputations", "count", "max-min rate recomputations"),
            ("flow_rate_assignments", "count", "flow rates assigned by the recomputations")):
        registry.metric(f"network_stats.{key}", unit, what)
    for section in ("links", "bottleneck"):
        for key, unit, what in (
                ("max_queue", "count", "longest FIFO of messages (congestion)"),
                ("utilization", "fraction", "busy over the run (congestion) or bytes over capacity while busy (flow)"),
                ("saturated_ns", "ns", "time the link was a max-min bottleneck (flow)"),
                ("max_concurrent_flows", "count", "most flows at once (flow)")):
            registry.metric(f"network_stats.{section}.*.{key}", unit, what)
    registry.metric("network_stats.links.*.bandwidth_bytes_per_ns", "bytes_per_ns", "the link's bandwidth (flow)")
