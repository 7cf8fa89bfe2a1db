"""``astra fabric SPEC``: what ``--fabric SPEC`` builds over a platform's (or a network YAML's) nodes: a summary, its
JSON, or the fabric written as an InfraGraph file (``-o``) that ``--network-configuration`` runs on flow/congestion."""

from __future__ import annotations

import json
import os
import tempfile

from astra_sim.errors import ConfigError

from astra_network_congestion.fabrics import (GIB, build_fabric, fabric_from_options, fabric_infragraph, layout,
                                              parse_fabric)


def register_command(subparsers):
    parser = subparsers.add_parser(
        "fabric", help="a rail-optimised or multi-plane fat tree from a few parameters: summary, or -o InfraGraph",
        description="Build the scale-out fabric that `astra run --fabric SPEC` gives the flow and congestion "
                    "backends, over --platform NAME --nodes N (its NICs and default leaf size) or an analytical "
                    "network YAML ([scale-up Switch, scale-out Switch]); print its numbers, or write it as an "
                    "InfraGraph file with -o. SPEC: rail[:nodes_per_leaf=N][:over=R][:nic_gbps=G][:spines=S] or "
                    "planes[:planes=P]... (docs/hardware.md).")
    from astra_sim.cliutil import add_platform_flags

    parser.add_argument("spec", metavar="SPEC", help="e.g. rail:nodes_per_leaf=16:over=2 or planes:planes=2")
    add_platform_flags(parser)  # the fabric over --nodes N (>= 2) nodes of a GPU platform
    parser.add_argument("--network-configuration", metavar="YAML",
                        help="instead of --platform: an analytical network YAML ([scale-up, scale-out] Switches)")
    parser.add_argument("-o", "--output", metavar="PATH",
                        help="write the fabric as an InfraGraph wrapper YAML (inline infrastructure, logical_dims)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON on stdout")
    parser.add_argument("--scale-out", metavar="KIND", default=None,
                        help="with --platform: the fabric technology (ib-ndr, ib-xdr, roce, spectrum-x) as `astra run "
                             "--scale-out` takes it: its leaf switch, NIC rate, routing and latency, each number's "
                             "source (ASSUMPTION where none was found)")
    parser.set_defaults(run_command=run_command)
    return parser


def run_command(args):
    spec = parse_fabric(args.spec, "SPEC")
    if (args.platform is None) == (args.network_configuration is None):
        raise ConfigError("--platform / --network-configuration: give one of them (--platform NAME --nodes N, or an "
                          "analytical network YAML)")
    if args.output:
        from astra_sim.outputs import check_writable_folder

        check_writable_folder(os.path.dirname(os.path.abspath(args.output)), f"--output {args.output}")
    with tempfile.TemporaryDirectory() as folder:
        path, options = _network(args, spec, folder)
        from astra_network_analytical import parse_network_config

        label = (f"--platform {args.platform} --nodes {args.nodes}" if args.platform
                 else f"--network-configuration {args.network_configuration}")
        try:
            config = parse_network_config(path)
            spec = fabric_from_options({**options, "fabric": spec})
            fabric = build_fabric(config, spec)
        except ConfigError as exc:  # a platform's network is a file of ours: name the platform instead
            raise ConfigError(str(exc).replace(path, label)) from None
        info = summary(config, spec, fabric, label, (options.get("fabric_defaults") or {}).get("scale_out"))
        if args.output:
            import yaml

            from astra_sim.safeio import write_or_recover

            text = (f"# astra fabric {args.spec} {label}: an InfraGraph wrapper for --network-configuration "
                    "on the flow/congestion backends\n" + yaml.safe_dump(fabric_infragraph(config, spec),
                                                                         sort_keys=False))
            write_or_recover(args.output, text.encode("utf-8"), "astra fabric", "--output")
    print(json.dumps(info, indent=1) if args.json else format_summary(info))
    return 0


def _network(args, spec, folder):
    """The analytical network YAML's path and the run options a platform implies (its default leaf size)."""
    if args.network_configuration:
        if args.scale_out is not None:
            raise ConfigError("--scale-out: needs --platform NAME --nodes N (a platform's NICs), not "
                              "--network-configuration")
        return args.network_configuration, {}
    from astra_sim.platforms import get_platform

    if args.nodes < 2:
        raise ConfigError(f"--nodes: a fabric joins nodes, expected an integer >= 2, got {args.nodes}")
    setup = get_platform(args.platform).resolve(
        args.nodes, {"fabric": args.spec, **({"scale_out": args.scale_out} if args.scale_out is not None else {})})
    if args.scale_out is not None and "scale_out" not in (setup.options.get("fabric_defaults") or {}):
        raise ConfigError(f"--scale-out {args.scale_out}: platform {args.platform} does not take a scale-out kind")
    path = os.path.join(folder, "network.yml")
    with open(path, "w") as handle:
        handle.write(setup.network_configuration.text)
    return path, {"fabric_defaults": setup.options.get("fabric_defaults")}


def summary(config, spec, fabric, network, scale_out=None) -> dict:
    """The fabric's description plus where its nodes come from (``network``), its size (switches, directed links)
    and a full leaf's uplink to each spine."""
    lay = layout(config, spec)
    graph = fabric.graph.describe()
    return {"units": {"time": "ns", "size": "bytes"}, **fabric.description, "network": network,
            "nic_hop_latency_ns": int(lay.hop_ns), "switches": graph["switches"], "directed_links": graph["links"],
            "leaf_uplink_gbit_per_s_per_spine": round(lay.uplink_gib(0, spec) * GIB * 8 / 1e9, 3),
            **({"scale_out": scale_out} if scale_out else {})}


def format_summary(info) -> str:
    return "\n".join([
        f"fabric {info['spec']} over {info['network']}: {info['kind']}, {info['planes']} plane(s), "
        f"{info['nodes']} nodes x {info['gpus_per_node']} GPUs",
        f"  NIC {info['nic_gbit_per_s']:g} Gb/s per GPU ({info['port_gbit_per_s']:g} Gb/s per plane port)",
        f"  per rail and plane: {info['leaves_per_rail_per_plane']} leaves of {info['nodes_per_leaf']} nodes; "
        f"{info['spines_per_plane']} spine{'s' if info['spines_per_plane'] != 1 else ''} per plane; a leaf's uplink "
        f"to each spine "
        f"{info['leaf_uplink_gbit_per_s_per_spine']:g} Gb/s (oversubscription {info['oversubscription']:g})",
        f"  {info['switches']} switches, {info['directed_links']} directed links",
        f"  routing: {info['routing']}",
    ] + (_scale_out_lines(info["scale_out"]) if "scale_out" in info else []))


def _scale_out_lines(kind) -> list:
    """The --scale-out kind's numbers (from the platform's resolution), an assumed one marked (ASSUMPTION)."""
    assumed = set(kind["assumptions"])

    def mark(key):
        return " (ASSUMPTION)" if key in assumed else ""

    load = (f"past one leaf: x{kind['loaded_share']:g} under load{mark('loaded_share')}" if kind["at_scale"]
            else f"within one leaf: no spine crossing (x{kind['loaded_share']:g}{mark('loaded_share')} past one)")
    return [
        f"  scale-out {kind['kind']}: {kind['description']}",
        f"    NIC {kind['line_gbit_per_s']:g} Gb/s x {kind['nic_achievable_share']:g} achievable; {load}; effective "
        f"{kind['effective_gbit_per_s']:g} Gb/s per GPU on the analytical network; leaves of "
        f"{kind['nodes_per_leaf']} nodes "
        f"({kind['leaf_switch']}{mark('leaf_ports')}); routing {kind['routing']} (--flow-ecmp {kind['flow_ecmp']})",
        f"    one-way {kind['one_way_latency_ns']} ns = endpoints {kind['endpoint_latency_ns']}"
        f"{mark('endpoint_latency_ns')} + {kind['switches_crossed']} x switch {kind['switch_latency_ns']}"
        f"{mark('switch_latency_ns')} ns",
        "    sources: astra fabric --json (scale_out.sources)",
    ]
