"""``astra platforms``: every registered platform (:mod:`astra_sim.platforms`) with its numbers and sources.

The kernel owns ``--platform`` and the registry; this listing is the gpu model's (registered with
``astra_register_commands``), as its columns are the numbers its platforms describe: NIC kind, GEMM calibration,
scale-out fabric. TPU platforms (astra-compute-systolic, which depends on this plugin) are listed too."""

from __future__ import annotations

from astra_sim.cliutil import positive_int


def add_platforms_command(subparsers):
    parser = subparsers.add_parser("platforms", help="list the --platform machines (GPU or TPU) and their sources",
                                   description="List the platforms `astra run --platform NAME` knows: every "
                                   "installed plugin's (astra_register_platforms).")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout, with every source")
    parser.add_argument("--nodes", type=positive_int, default=1, metavar="N", help="show totals for N nodes (default 1)")
    parser.set_defaults(run_command=_cmd_platforms)


def _cmd_platforms(args):
    import json

    rows = describe_platforms(args.nodes, getattr(args, "plugin_manager", None))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from astra_sim.termtable import Column, console, fit_columns, print_table

    # at 80 columns one device count goes: the total when it equals the per-node count
    # (a "node" is a GPU machine's scale-up domain, or a TPU slice)
    one_node = args.nodes == 1
    columns = [Column("platform"), Column("device"),
               Column("devices/\nnode", number=True, drop=None if one_node else 1),
               Column("total\ndevices", number=True, drop=1 if one_node else None),
               Column("scale-up\nGB/s/dir", number=True),
               # the NIC's scale-out kind beside its rate, so that the table still fits 80 columns (issue 40)
               Column("NIC Gb/s\nper device\n(scale-out)", number=True), Column("HBM\nGB/s", number=True, drop=2),
               Column("bf16\nTFLOP/s", number=True, drop=3),
               # how far the device's GEMM times rest on its own measurements (a GPU preset's calibration_status)
               Column("GEMM\ncalib.", drop=4),
               # the scale-out fabric --fabric builds by default (issue 40); at 80 columns a note says it instead
               Column("scale-out fabric\n(--fabric)", drop=5)]
    # a device whose GEMM times rest partly on assumptions is marked where every width shows it (issue 40)
    table_rows = [[r["name"], r["gpu"] + (" *" if r.get("calibration") == "partial" else ""),
                   str(r["gpus_per_node"]), str(r["total_gpus"]),
                   f"{r['scaleup_gb_per_s_per_direction']:g}", _nic(r),
                   f"{r['hbm_bandwidth_gbps']:g}", f"{r['bf16_tflops']:g}", r.get("calibration") or "-", _fabric(r)]
                  for r in rows]
    notes = ["* GEMM times partly assumed"] if any(r.get("calibration") == "partial" for r in rows) else []
    out = console()
    cells = [_fabric(r) for r in rows if r.get("fabric")]
    if cells and len(columns) - 1 not in fit_columns(columns, table_rows, out.width):  # the fabric column left out
        notes.append("scale-out fabric (--fabric): " + ", ".join(f"{c} on {cells.count(c)} platforms"
                                                                 for c in dict.fromkeys(cells)))
    print_table(f"astra run --platform (nodes={args.nodes}; sources and assumptions: astra platforms --json)",
                columns, table_rows, caption="; ".join(notes) or None, out=out)
    return 0


def describe_platforms(nodes=1, pm=None) -> list:
    """Every platform's :meth:`~astra_sim.platforms.Platform.describe` rows, GPU machines first."""
    from astra_sim.platforms import platforms

    rows = [dict(p.describe(nodes), family=p.family) for p in platforms(pm).values()]
    rows.sort(key=lambda row: row.get("family", "gpu") != "gpu")
    return rows


def _nic(row):
    """The NIC cell: Gb/s per device, and the NIC's scale-out kind when the platform names one (``400 (ib-ndr)``)."""
    kind = (row.get("scale_out") or {}).get("kind")
    return f"{row['nic_gbit_per_s_per_gpu']:g}" + (f" ({kind})" if kind else "")


def _fabric(row):
    """The fabric cell: the kind, oversubscription and planes of the fabric ``--fabric`` builds (``rail 1:1, 1 plane``;
    its leaves in ``--json``), or - (a TPU slice: none)."""
    fabric = row.get("fabric")
    if not fabric:
        return "-"
    planes = fabric["planes"]
    return f"{fabric['kind']} {fabric['oversubscription']:g}:1, {planes} plane{'s' if planes > 1 else ''}"
