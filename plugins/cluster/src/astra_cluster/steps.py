"""Step times, each distinct (job, placement, condition) simulated once.

A job's step depends on where its ranks are and on how slow its GPUs are, not on the wall clock: a week of a
cluster repeats a handful of distinct steps. :class:`StepTimes` simulates each one the first time it is asked
and remembers it; ``simulated`` counts them (the report's ``distinct_steps_simulated``).

On a platform the nodes hang off switches, so renumbering nodes changes no delay: a placement is kept up to
that (:func:`~astra_cluster.placement.shape_key`) and simulated on as many nodes as it uses. On configuration
files (any topology) the placement is kept as it is and simulated on the whole network.

A cable that fails inside a step (flow, ns3) makes that step a distinct step of its own: the condition then holds
the cables down before it and ``failing``, the cable and how far into the step it goes down."""

from __future__ import annotations

import os

from .placement import shape_key
from .workloads import workload_key, write_combined


def job_step_ns(report, gpus) -> int:
    """A job's step in a report: the latest finish over its GPUs."""
    finish = {rank.rank: rank.finish_ns for rank in report.ranks}
    return max(finish[gpu] for gpu in gpus)


class StepTimes:
    """``step_ns(job, gpus, factors=None)``: the step of ``job`` (its workload in ``workloads[job.name]``) on
    cluster GPUs ``gpus`` with compute slowdowns ``factors`` (``{GPU: factor}``). Jobs with the same workload
    share their steps."""

    def __init__(self, machine, workloads, folder):
        self.machine = machine
        self.workloads = workloads
        self.folder = folder
        self.memo = {}
        #: combined workloads already written: (its jobs' workloads and GPUs, GPUs in all) -> (prefix, groups file);
        #: a step of the same jobs on the same GPUs under another condition (slow GPUs, jitter, cables down) runs
        #: the same traces (issue 37: written once, not once per straggler draw or timeline condition)
        self.written = {}
        #: cables down now (failure events on flow / ns3): part of every step's condition, routed around
        self.down = ()

    @property
    def simulated(self) -> int:
        return len(self.memo)

    def step_ns(self, job, gpus, factors=None, jitter=None, failing=()):
        return self.step_and_busiest(job, gpus, factors, jitter, failing)[0]

    def step_and_busiest(self, job, gpus, factors=None, jitter=None, failing=()):
        """``(step, i)``: the step, and the position in ``gpus`` of the GPU that computed longest (with per-op
        ``jitter``, ``(sigma, seed)``, the one that set the pace most). ``failing``: ``((cable, offset ns),)``,
        cables of ``down`` that go down that far into this step (up before it)."""
        machine = self.machine
        per_rank = tuple(round((factors or {}).get(gpu, 1.0), 6) for gpu in gpus)
        symmetric = machine.renumberable
        where = shape_key(gpus, machine.gpus_per_node) if symmetric else tuple(gpus)
        failing = tuple(failing)
        down = tuple(cable for cable in self.down if cable not in {cable for cable, _at in failing})
        key = (workload_key(job), where, per_rank, down, jitter, failing)
        if key not in self.memo:
            if symmetric:
                nodes = 1 + max(node for node, _ in where)
                local = [node * machine.gpus_per_node + gpu for node, gpu in where]
            else:
                nodes, local = None, list(gpus)
            total = (nodes or machine.nodes) * machine.gpus_per_node
            prefix, groups = self._combined(total, [(job, local)])
            slow = {gpu: f for gpu, f in zip(local, per_rank) if f != 1.0}
            report = machine.simulate(prefix, groups, slow, nodes=nodes, down=down, jitter=jitter, failing=failing)
            compute = {rank.rank: rank.compute_ns for rank in report.ranks}
            busiest = max(range(len(local)), key=lambda i: (compute[local[i]], -i))
            self.memo[key] = (job_step_ns(report, local), busiest)
        return self.memo[key]

    def together_ns(self, items):
        """``{job name: step}`` of ``items`` (``[(job, gpus, factors)]``) running at once on the whole cluster: one
        combined workload, simulated once per distinct set (a lone job: :meth:`step_ns`)."""
        if len(items) == 1:
            job, gpus, factors = items[0]
            return {job.name: self.step_ns(job, gpus, factors)}
        machine = self.machine
        key = ("together", frozenset((workload_key(job), tuple(gpus),
                          tuple(round((factors or {}).get(gpu, 1.0), 6) for gpu in gpus))
                         for job, gpus, factors in items), self.down)
        if key not in self.memo:
            prefix, groups = self._combined(machine.total_gpus, [(job, gpus) for job, gpus, _f in items])
            slow = {gpu: f for _job, gpus, factors in items for gpu, f in (factors or {}).items() if f != 1.0}
            report = machine.simulate(prefix, groups, slow, down=self.down)
            self.memo[key] = {(workload_key(job), tuple(gpus)): job_step_ns(report, gpus) for job, gpus, _f in items}
        found = self.memo[key]
        return {job.name: found[(workload_key(job), tuple(gpus))] for job, gpus, _f in items}

    def _combined(self, total, jobs):
        """``(prefix, groups file)`` of the combined workload of ``jobs`` (``[(job, GPUs)]``, in this order) on
        ``total`` GPUs, written the first time it is asked."""
        key = (total, tuple((workload_key(job), tuple(gpus)) for job, gpus in jobs))
        if key not in self.written:
            prefix = os.path.join(self.folder, "steps", str(len(self.written)), "trace")
            combined = write_combined(prefix, total, [(self.workloads[job.name], gpus) for job, gpus in jobs])
            self.written[key] = (prefix, combined["comm_groups"])
        return self.written[key]
