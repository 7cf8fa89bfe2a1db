"""`astra infragraph`: print an InfraGraph infrastructure's summary (nodes, links, bandwidths, ranks, logical
dimensions) or its analytical equivalent."""

from __future__ import annotations

import json
import os

from astra_sim.errors import ConfigError

from astra_network_congestion.infragraph import gib_per_s, load_infragraph
from astra_network_congestion.infragraph_analytical import format_analytical, to_analytical


# ------------------------------------------------------------------ summary


def summarize(model):
    """A JSON-able description: nodes by type, links by name with bandwidth/latency, ranks, dims."""
    graph = model.graph
    types = {}
    for _, data in graph.nodes(data=True):
        key = str(data.get("type"))
        types[key] = types.get(key, 0) + 1
    links = []
    for group in model.link_groups:
        bws = sorted(group["bandwidth_bytes_per_s"])
        lats = sorted(group["latency_ns"])
        links.append({
            "link": group["link"],
            "device": group["device"],
            "edges": group["edges"],
            "bandwidth_given": group["bandwidth_given"],
            "bandwidth_GiBps": [round(gib_per_s(b), 6) for b in bws],
            "bandwidth_Gbps": [round(b * 8 / 1e9, 6) for b in bws],
            "latency_ns": lats,
            "missing_bandwidth": group["missing_bandwidth"],
            "missing_latency": group["missing_latency"],
        })
    ranks = model.rank_node
    return {
        "units": {"time": "ns", "size": "bytes"},  # bandwidths carry theirs in their names (GiBps, Gbps)
        "file": model.path,
        "infrastructure": model.infrastructure_path,
        "annotations": list(model.annotation_paths),
        "name": graph.graph.get("name"),
        "nodes": graph.number_of_nodes(),
        "node_types": dict(sorted(types.items())),
        "npus": len(model.npu_nodes),
        "switches": graph.number_of_nodes() - len(model.npu_nodes),
        "edges": graph.number_of_edges(),
        "directed_links": 2 * graph.number_of_edges(),
        "links": links,
        "routers": len(model.routers),
        "ranks": len(ranks),
        "rank_source": model.rank_source,
        "rank_nodes": {str(r): ranks[r] for r in sorted({0, 1, len(ranks) // 2, len(ranks) - 2, len(ranks) - 1})
                       if 0 <= r < len(ranks)},
        "logical_dims": list(model.logical_dims),
        "logical_dims_source": model.dims_source,
        "loadable": not model.problems,
        "problems": list(model.problems),
        "warnings": list(model.warnings),
    }


def format_summary(info):
    lines = [f"InfraGraph {info['file']}" + (f" ({info['name']})" if info["name"] else "")]
    if info["infrastructure"] != info["file"]:
        lines.append(f"  infrastructure: {info['infrastructure']}")
    if info["annotations"]:
        lines.append(f"  annotations:    {', '.join(info['annotations'])}")
    types = ", ".join(f"{k} {v}" for k, v in info["node_types"].items())
    lines.append(f"nodes: {info['nodes']} ({types}) -> {info['npus']} NPUs, "
                 f"{info['switches']} switches/forwarding nodes")
    lines.append(f"links: {info['edges']} cables = {info['directed_links']} directed links")
    width = max([len(_link_label(link)) for link in info["links"]] + [4])
    lines.append(f"  {'link':<{width}}  {'edges':>5}  {'bandwidth (given)':<24} {'GB/s (2^30)':>12}  latency ns")
    for link in info["links"]:
        given = link["bandwidth_given"] or "MISSING"
        gib = "/".join(f"{b:g}" for b in link["bandwidth_GiBps"]) or "-"
        lat = "/".join(f"{x:g}" for x in link["latency_ns"]) or "MISSING"
        if link["missing_bandwidth"] and link["bandwidth_GiBps"]:
            given += f" ({link['missing_bandwidth']} missing)"
        if link["missing_latency"] and link["latency_ns"]:
            lat += f" ({link['missing_latency']} missing)"
        lines.append(f"  {_link_label(link):<{width}}  {link['edges']:>5}  {given:<24} {gib:>12}  {lat}")
    if info["routers"]:
        lines.append(f"  + {info['routers']} router nodes: every NPU linked directly to another NPU gets a router "
                     "that carries its cables, so traffic can pass it (link npu-router, 0 ns)")
    lines.append(f"ranks: {info['ranks']} from {info['rank_source']}")
    lines.append("  " + ", ".join(f"rank {r} = {n}" for r, n in info["rank_nodes"].items()))
    lines.append(f"logical dims: {info['logical_dims']} ({info['logical_dims_source']})")
    for message in info["warnings"]:
        lines.append(f"warning: {message}")
    if info["problems"]:
        lines.append("loadable by the flow/congestion backends: no")
        lines.extend(f"  problem: {p}" for p in info["problems"])
    else:
        lines.append("loadable by the flow/congestion backends: yes")
    return "\n".join(lines) + "\n"


def _link_label(link):
    return f"{link['device']}/{link['link']}" if link["device"] else str(link["link"])


# ------------------------------------------------------------------ the `astra infragraph` command


def register_command(subparsers):
    parser = subparsers.add_parser(
        "infragraph",
        help="inspect an InfraGraph infrastructure: --summary, or --to-analytical",
        description=(
            "Load an InfraGraph infrastructure (YAML/JSON) or a wrapper YAML (infrastructure, annotations, "
            "logical_dims, links, ...) as the flow and congestion backends do, then print a summary or the "
            "equivalent analytical network YAML."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="InfraGraph infrastructure or wrapper YAML")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--summary", action="store_true", help="nodes, links, bandwidths, ranks, logical dims")
    mode.add_argument("--to-analytical", action="store_true",
                      help="print the equivalent analytical YAML (topology/npus_count/bandwidth/latency)")
    parser.add_argument("--logical-dims", metavar="D0,D1,...",
                        help="logical dimensions (default: the wrapper's logical_dims; for --to-analytical "
                             "without any, detected from the graph)")
    parser.add_argument("-o", "--output", metavar="PATH",
                        help="write to PATH: the summary as JSON (latencies in ns; the text still on stdout), or the "
                        "analytical YAML (instead of stdout)")
    parser.add_argument("--json", action="store_true", help="with --summary: print the summary as JSON on stdout")
    parser.set_defaults(run_command=run_command)
    return parser


def run_command(args):
    """--summary: the text (or with --json the JSON) on stdout, -o writes the JSON; --to-analytical: the YAML on
    stdout, or into -o's file. -o always writes a file, --json always prints JSON (the CLI's vocabulary). -o's folder
    is checked before the file is read."""
    if args.output:
        from astra_sim.outputs import check_writable_folder

        check_writable_folder(os.path.dirname(os.path.abspath(args.output)), f"--output {args.output}")
    if args.summary:
        model = load_infragraph(args.file, logical_dims=args.logical_dims, strict=False)
        info = summarize(model)
        data = json.dumps(info, indent=1) + "\n"
        if args.output:
            _write(args.output, data)
        print(data if args.json else format_summary(info), end="")
        return 0
    if args.json:
        raise ConfigError("--json is for --summary (--to-analytical prints YAML)")
    model = load_infragraph(args.file, logical_dims=args.logical_dims, strict=True)
    explicit = args.logical_dims is not None or "logical_dims" in model.settings
    dims = model.logical_dims if explicit else None
    result = to_analytical(model.network, dims)
    source = (f"{model.logical_dims} from {model.dims_source}" if explicit
              else f"{result['npus_count']} (detected from the graph)")
    text = format_analytical(result, args.file, source)
    if args.output:
        _write(args.output, text)
    else:
        print(text, end="")
    return 0


def _write(path, text):
    """Atomically; a late failure (a full disk) keeps ``text`` in a recovered file and the ConfigError says where."""
    from astra_sim.safeio import write_or_recover

    write_or_recover(path, text.encode("utf-8"), "astra infragraph", "--output")
