"""Jobs running at once on one fabric: one combined workload, simulated once, against each job alone.

Each job's step together is the latest finish over its GPUs in the combined run; alone, the same with only that
job on the same GPUs of the same network (the others idle), so the slowdown is the fabric's doing and nothing
else. The links two or more jobs fought over are those each of them used when alone (the ``congestion`` and
``flow`` backends report every link's bytes and busy time in ``network_stats``; ``analytical`` has no links, so
it shows no shared links and, being contention-free, no slowdown)."""

from __future__ import annotations

import os

from .steps import job_step_ns
from .workloads import write_combined


def corun(machine, placed, folder) -> dict:
    """``placed``: ``[(job, JobWorkload, gpus)]``. Returns ``{"jobs": [...], "shared_links": [...]}`` (ns)."""
    def run(name, items):
        prefix = os.path.join(folder, "corun", name, "trace")
        combined = write_combined(prefix, machine.total_gpus, [(workload, gpus) for _job, workload, gpus in items])
        return machine.simulate(prefix, combined["comm_groups"])

    together = run("together", placed) if len(placed) > 1 else None
    rows, used = [], {}
    for job, workload, gpus in placed:
        alone = run(f"alone-{job.name}", [(job, workload, gpus)])
        alone_ns = job_step_ns(alone, gpus)
        with_ns = alone_ns if together is None else job_step_ns(together, gpus)
        rows.append({"job": job.name, "gpus": len(gpus), "placement": gpus, "alone_step_ns": alone_ns,
                     "together_step_ns": with_ns, "slowdown": with_ns / alone_ns if alone_ns else 1.0})
        for link in _links(alone):
            if link["bytes"]:
                used.setdefault((link["src"], link["dst"]), {})[job.name] = link["bytes"]
    busy = {(link["src"], link["dst"]): link for link in _links(together)} if together is not None else {}
    shared = []
    for (src, dst), jobs in sorted(used.items()):
        if len(jobs) > 1:
            link = busy.get((src, dst), {})
            shared.append({"src": src, "dst": dst, "jobs": sorted(jobs), "bytes_by_job": jobs,
                           "busy_ns_together": link.get("busy_ns"), "bytes_together": link.get("bytes")})
    return {"backend": machine.spec.network_backend, "jobs": rows, "shared_links": shared}


def _links(report):
    stats = report.network_stats or {}
    links = stats.get("links") if isinstance(stats, dict) else None
    return [link for link in links or () if "src" in link and "dst" in link and "bytes" in link]
