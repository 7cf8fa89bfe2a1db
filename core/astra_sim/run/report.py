"""A run's :class:`~astra_sim.report.Report`: settings, per-rank numbers, statistics, and the breakdown a plugin
derives from the recorded spans (``astra_report_breakdown``)."""

from __future__ import annotations

import time

from astra_sim import __version__
from astra_sim.api import network_stats
from astra_sim.chakra.types import node_type_name
from astra_sim.report import RankReport, Report


def settings(sim):
    """The report's ``settings`` of a :class:`~astra_sim.simulation.Simulation`."""
    setup = sim.setup
    return {
        "astra_sim_version": __version__,
        "workload": setup.workload_prefix,
        "workload_format": setup.workload_format_name,
        "system_configuration": setup.system_config_path,
        "network_configuration": setup.network_config_path,
        "remote_memory_configuration": setup.memory_config_path,
        "comm_group_configuration": setup.comm_group_path,
        "network_backend": setup.network_backend_name,
        "memory_backend": setup.memory_backend_name,
        "compute_model": setup.compute_model_name,
        "num_queues_per_dim": setup.queues_per_dim[0],
        "injection_scale": setup.injection_scale,
        "rendezvous_protocol": setup.rendezvous,
        "npus_per_dim": setup.npus_per_dim,
        "network": getattr(setup.network, "describe", lambda: {})(),
        "plugins": sorted(name for name, _ in setup.pm.list_name_plugin()),
        "fold": dict(sim.fold_info),
        "allow_unmatched": sim.allow_unmatched,
        **({"host": {"launch_ns": setup.host_issue[0], "sync_after_p2p_ns": setup.host_issue[1]}}
           if setup.host_issue is not None else {}),
    }


def _rank_reports(sim):
    """Every rank's numbers so far (``finish_ns`` None while running; a folded run's from its representatives)."""
    ranks = []
    workloads, symmetry = sim.workloads, sim.symmetry
    for rank, w in enumerate(workloads):
        if w is None and symmetry is not None:
            w = workloads[symmetry.representative(rank)]
        if w is None:
            continue
        finish = w.finish_ns
        ranks.append(RankReport(rank=rank, finish_ns=finish, compute_ns=w.compute_ns,
                                exposed_comm_ns=None if finish is None else finish - w.compute_ns,
                                cpu_ns=w.cpu_ns, comm_ns=w.comm_ns, nodes=len(w.nodes)))
    return ranks


def partial_report(sim, reason):
    """What an interrupted run knew, marked ``complete: False``."""
    ranks = _rank_reports(sim)
    stats = {"interrupted": reason, "simulated_ns": sim.engine.now,
             "ranks_finished": sum(r.finish_ns is not None for r in ranks),
             "stage": "simulating" if sim.workloads else "reading the workload"}
    return Report(ranks, settings(sim), stats, list(sim.warnings), complete=False)


def final_report(sim, build_s, run_s, peak_bytes):
    """The report of a run that ended (every rank finished, messages checked)."""
    workloads, symmetry = sim.workloads, sim.symmetry
    ranks = _rank_reports(sim)
    finish_order = list(sim.finish_order)
    scale = 1
    if symmetry is not None:
        # Ranks finish with their representative; among equal times, in rank order.
        finish_order = sorted(range(sim.total_npus), key=lambda r: (ranks[r].finish_ns, r))
        scale = symmetry.order
    run_settings = settings(sim)
    engine, matcher = sim.engine, sim.matcher
    stats = {
        "events": engine.events_run,
        "simulated_ranks": sum(w is not None for w in workloads),
        # a folded run counts every rank's messages and nodes (its representative's times the class size)
        "messages": matcher.messages * scale,
        "message_bytes": matcher.bytes * scale,
        "build_s": round(build_s, 6),
        "traces_parsed": sim.traces_parsed,
        "run_s": round(run_s, 6),
        "events_per_s": round(engine.events_run / run_s) if run_s > 0 else None,
        "nodes_by_type": {node_type_name(t): n * scale for t, n in sorted(sim.node_counts.items())},
    }
    if peak_bytes is not None:
        stats["peak_python_memory_bytes"] = peak_bytes
    report = Report(ranks, run_settings, stats, list(sim.warnings), finish_order, network_stats(sim.network),
                    unmatched_messages=list(sim.unmatched_messages))
    if sim.want_breakdown:
        breakdown(sim, report)
    return report


#: the warning of a run that asked for a breakdown when no loaded plugin computes one
NO_BREAKDOWN = ("no breakdown in the report: no loaded plugin computes it (the astra-analysis plugin does: it is "
                "blocked with -p no:analysis, or not installed)")


def breakdown(sim, report):
    """The breakdown a plugin derives from its spans (``astra_report_breakdown``: the analysis plugin's)."""
    started = time.perf_counter()
    if not sim.pm.hook.astra_report_breakdown(run=sim.view, report=report):
        sim.warn(NO_BREAKDOWN)
        if NO_BREAKDOWN not in report.warnings:
            report.warnings.append(NO_BREAKDOWN)
    report.stats["analysis_s"] = round(time.perf_counter() - started, 6)
