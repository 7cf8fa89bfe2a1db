"""A cluster over days: jobs arrive, queue, get placed, run, checkpoint, fail, restart and finish.

A job-level event simulation. A running job alternates compute segments of ``k`` steps with a checkpoint write
(``delta``; on shared storage, a write at the rate :class:`~astra_cluster.storage.SharedStorage` gives it); its
progress counts once the write completes. A cable that goes down (``link: [a, b]``, on ``flow`` and ``ns3``) stops
no job: from then on every step is simulated on the graph without it, and running jobs go on at their new steps.
On ``flow`` and ``ns3`` the step a running job is in when the cable fails is simulated with the cable going down
at that offset into it (the backends' run option ``link_failures``), and the job's next steps without it; on
``analytical`` (and with ``timeline_corun``) the rest of the job's segment runs at its new step from the cable's
time, pro rata, as when a cable comes back.
A failure (a GPU, a node, a GPU's link or a switch going down, at a given time or drawn from MTBFs with the
cluster's seed) stops every job on it: the work since its
last checkpoint is lost, its GPUs are freed (the failed ones come back after ``repair_h``), and it queues again;
a restart costs ``restart_s`` plus reading the checkpoint. A job's goodput is its useful (checkpointed or final)
steps over the wall time since it first started, as a rate (``goodput_steps_per_h``) and as a fraction of the
rate it would have on the fewest nodes of an empty cluster (``goodput``; ``reference_step_ns``): queueing, lost
work, checkpoints, restarts and a slow placement all lower it. The cluster's goodput is the useful GPU-time (at
the reference rates) over all GPUs' time. Step times come from :class:`~astra_cluster.steps.StepTimes` (each
distinct (job, placement, condition) simulated once); the condition is the named slow GPUs. Each job's step is
its step alone on its GPUs; with ``timeline_corun: true`` it is its step beside the jobs running with it (one
combined simulation per distinct set of running jobs and placements), and it changes when they start or stop.

Checkpoint interval: ``interval_steps``, or ``young-daly``: Young's ``tau = sqrt(2 delta M)`` (M: the job's mean
time between failures: one over the sum of the units it uses over their MTBFs) in whole steps. Without failures
and without an interval, a job never checkpoints. Sources: J. W. Young, "A first order approximation to the
optimum checkpoint interval", CACM 17(9), 1974; J. T. Daly, "A higher order estimate of the optimum checkpoint
interval for restart dumps", FGCS 22(3), 2006 (:func:`daly_goodput` is his expected wall time for exponential
failures).

Schedulers: ``fifo`` (arrival order; the head waits until it fits and holds the others back), ``sjf`` (least
remaining work first, same rule), ``backfill`` (fifo, and a later job may start now when it fits and either ends
before the head's reservation or leaves the GPUs the head will need: EASY backfilling)."""

from __future__ import annotations

import heapq
import math

from .placement import _pack, nodes_used, place
from .spec import YOUNG_DALY
from .storage import SharedStorage

_GB = 1e9  # checkpoint bandwidths are GB/s of 1e9 bytes


def young_interval_ns(delta_ns, mtbf_ns) -> float:
    """Young's optimum checkpoint interval (compute time between checkpoints)."""
    return math.sqrt(2.0 * delta_ns * mtbf_ns)


def daly_interval_ns(delta_ns, mtbf_ns) -> float:
    """Daly's higher-order optimum (for ``delta < 2 M``; else ``M``)."""
    if delta_ns >= 2 * mtbf_ns:
        return float(mtbf_ns)
    x = delta_ns / (2.0 * mtbf_ns)
    return math.sqrt(2.0 * delta_ns * mtbf_ns) * (1 + math.sqrt(x) / 3 + x / 9) - delta_ns


def daly_goodput(tau_ns, delta_ns, restart_ns, mtbf_ns) -> float:
    """Useful time over wall time under exponential failures of mean ``mtbf_ns``: ``tau / (M e^(R/M)
    (e^((tau + delta)/M) - 1))`` (Daly 2006, eq. for the expected wall time, failures also during checkpoints and
    restarts)."""
    m = float(mtbf_ns)
    return tau_ns / (m * math.exp(restart_ns / m) * math.expm1((tau_ns + delta_ns) / m))


class _Job:
    def __init__(self, spec, index, checkpoint_bytes):
        self.spec = spec
        self.index = index
        self.checkpoint_bytes = checkpoint_bytes
        self.done_steps = 0          # committed (checkpointed or finished)
        self.state = "waiting"       # waiting (not arrived), queued, running, done
        self.gpus = None
        self.epoch = 0               # bumps on every start and stop: stale events are dropped
        self.segment_steps = 0
        self.segment_start = 0       # when the current segment's compute starts (after a restart)
        self.progress = 0.0          # steps of the segment done by progress_at (the step may change mid-way)
        self.progress_at = 0
        self.write_ns = 0
        self.write_start = None      # when its checkpoint write began (shared storage)
        self.io_version = 0          # bumps when the shared storage moves its write's (or read's) end
        self.restoring_since = None  # restarting on shared storage: the restart's fixed part, then the read
        self.step_ns = 0
        self.interval = None
        self.started_once = False
        self.first_start = None
        self.end = None
        self.useful_ns = 0
        self.lost_ns = 0
        self.checkpoint_ns = 0
        self.restart_ns = 0
        self.queued_ns = 0
        self.queued_since = None
        self.failures = 0
        self.placements = []
        self.retimes = []            # its step changed while it ran (jobs beside it, cables down or back)
        self.mtbf_ns = None          # where it first ran (for the optimum intervals)

    @property
    def remaining(self):
        return self.spec.steps - self.done_steps


class Timeline:
    """One run of the event simulation (see the module docstring); :meth:`run` gives the report's ``timeline``."""

    def __init__(self, spec, machine, steps, checkpoint_bytes):
        import random

        self.spec = spec
        self.machine = machine
        self.steps = steps
        # failures and placements draw from streams of their own: two policies meet the same failures
        self.failure_rng = random.Random(f"failures-{spec.seed}")
        self.placement_rng = random.Random(f"timeline-placement-{spec.seed}")
        self.jobs = [_Job(job, i, checkpoint_bytes.get(job.name, 0)) for i, job in enumerate(spec.jobs)]
        self.free = set(range(machine.total_gpus))
        self.down = {}  # GPU -> repairs pending on it
        self.events = []
        self.seq = 0
        self.now = 0
        self.failures = []
        self.slow = dict(spec.stragglers.slow_gpus) if spec.stragglers else {}
        self._running_key = ()
        self.cable_events = []  # cables going down and coming back (routed around, not failures of jobs)
        aggregate = spec.checkpoint.storage_write_gb_per_s
        self.storage = SharedStorage(float("inf") if aggregate is None else aggregate * _GB / 1e9) \
            if spec.checkpoint.shared else None
        aggregate = spec.checkpoint.storage_read_gb_per_s  # reads share a storage of their own (not the writes')
        self.read_storage = SharedStorage(float("inf") if aggregate is None else aggregate * _GB / 1e9) \
            if spec.checkpoint.shared_reads else None

    # ------------------------------------------------------------------ events
    def push(self, time, kind, payload=None):
        self.seq += 1
        heapq.heappush(self.events, (time, self.seq, kind, payload))

    def run(self) -> dict:
        horizon = self.spec.horizon_ns
        for job in self.jobs:
            self.push(job.spec.arrival_ns, "arrive", job)
        failures = self.spec.failures
        if failures is not None:
            for at, kind, index in failures.events:
                self.push(at, "fail", (kind, index, False))
            for at, cable, down_ns in failures.cables:
                self.push(at, "cable", (cable, down_ns))
            self._next_random_failure(0)
        while self.events:
            time, _seq, kind, payload = heapq.heappop(self.events)
            if time > horizon:
                break
            self.now = time
            if kind == "arrive":
                payload.state = "queued"
                payload.queued_since = time
            elif kind == "segment":
                job, epoch = payload
                if job.epoch != epoch:
                    continue
                self._segment_done(job)
            elif kind == "computed":  # shared storage: the segment's steps are done, its write begins
                job, epoch = payload
                if job.epoch != epoch:
                    continue
                job.write_start = time
                self._book_io(self.storage.start(job, job.checkpoint_bytes, self._io_cap(job, "write"), time),
                              "written")
            elif kind == "written":
                job, epoch, version = payload
                if job.epoch != epoch or job.io_version != version:
                    continue
                self._book_io(self.storage.stop(job, time), "written")
                self._segment_done(job)
            elif kind == "read":  # shared storage: the restart's fixed part is over, the checkpoint's read begins
                job, epoch = payload
                if job.epoch != epoch:
                    continue
                self._book_io(self.read_storage.start(job, job.checkpoint_bytes, self._io_cap(job, "read"), time),
                              "restored")
            elif kind == "restored":
                job, epoch, version = payload
                if job.epoch != epoch or job.io_version != version:
                    continue
                self._book_io(self.read_storage.stop(job, time), "restored")
                job.restart_ns += time - job.restoring_since
                job.restoring_since = None
                self._begin_segment(job, time)
            elif kind == "fail":
                unit, index, drawn = payload
                self._fail(unit, index)
                if drawn:
                    self._next_random_failure(time)
            elif kind == "cable":  # routed around: the jobs run on, at the steps of the graph left
                cable, down_ns = payload
                self.failures.append({"at_ns": time, "kind": "cable", "index": list(cable)})
                self._cable(cable, True)
                repair_ns = int(round(failures.repair_h * 3600e9))
                down_ns = down_ns if down_ns is not None else repair_ns
                if down_ns:
                    self.push(time + down_ns, "cable_back", cable)
            elif kind == "cable_back":
                self._cable(payload, False)
            elif kind == "repair":
                for gpu in payload:
                    self.down[gpu] -= 1
                    if not self.down[gpu]:
                        del self.down[gpu]
                        self.free.add(gpu)
            self._schedule()
            if self.spec.timeline_corun:
                self._retime_all()
            if all(job.state == "done" for job in self.jobs):
                break
        return self._report(min(self.now, horizon) if all(j.state == "done" for j in self.jobs) else horizon)

    # ------------------------------------------------------------------ failures
    def _units(self, kind) -> int:
        """How many of ``kind`` the cluster has (a link per GPU: its NIC)."""
        if kind in ("gpu", "link"):
            return self.machine.total_gpus
        if kind == "node":
            return self.machine.nodes
        return -(-self.machine.nodes // self.spec.failures.nodes_per_switch)

    def _gpus_of(self, kind, index):
        gpn = self.machine.gpus_per_node
        if kind in ("gpu", "link"):
            return [index]
        first, count = (index, 1) if kind == "node" else (index * self.spec.failures.nodes_per_switch,
                                                          self.spec.failures.nodes_per_switch)
        last = min(first + count, self.machine.nodes)
        return list(range(first * gpn, last * gpn))

    def _next_random_failure(self, time):
        """The next failure drawn from the MTBFs: every unit fails independently (exponential), so the cluster's
        failures are one Poisson process of rate sum(units / MTBF), each one of a unit drawn in proportion."""
        rates = [(kind, self._units(kind) / (hours * 3600e9)) for kind, hours in self.spec.failures.mtbf_h.items()]
        if not rates:
            return
        total = sum(rate for _kind, rate in rates)
        gap = self.failure_rng.expovariate(total)
        kind = rates[0][0]
        if len(rates) > 1:
            pick = self.failure_rng.random() * total
            for kind, rate in rates:
                if pick < rate:
                    break
                pick -= rate
        index = self.failure_rng.randrange(self._units(kind))
        self.push(time + max(1, int(round(gap))), "fail", (kind, index, True))

    # ------------------------------------------------------------------ jobs
    def _start(self, job, gpus):
        job.state = "running"
        job.gpus = gpus
        self.free.difference_update(gpus)
        job.epoch += 1
        job.queued_ns += self.now - job.queued_since
        factors = {gpu: self.slow[gpu] for gpu in gpus if gpu in self.slow}
        job.step_ns = self.steps.step_ns(job.spec, gpus, factors)
        job.placements.append({"at_ns": self.now, "gpus": len(gpus),
                               "nodes": nodes_used(gpus, self.machine.gpus_per_node), "step_ns": job.step_ns})
        job.interval = self._interval(job)
        if not job.started_once:
            job.started_once = True
            job.first_start = self.now
            job.mtbf_ns = self._job_mtbf_ns(job)
            self._begin_segment(job, self.now)
            return
        fixed = int(round(self.spec.checkpoint.restart_s * 1e9))
        if self.read_storage is None:  # the job reads its checkpoint alone, at read_gb_per_s
            restart = fixed + self._io_ns(job, "read")
            job.restart_ns += restart
            self._begin_segment(job, self.now + restart)
            return
        job.restoring_since = self.now  # then the read, at the share of the storage it gets ("read", "restored")
        job.segment_start = self.now + fixed  # no work is lost while restoring; the scheduler's estimate from here
        self.push(self.now + fixed, "read", (job, job.epoch))

    def _io_ns(self, job, what):
        rate = self.spec.checkpoint.write_gb_per_s if what == "write" else self.spec.checkpoint.read_gb_per_s
        return int(round(job.checkpoint_bytes / (rate * _GB) * 1e9))

    def _cable(self, cable, down):
        """``cable`` goes down (or comes back): every step from now on is simulated on the graph without the cables
        down, and every running job's step changes to it."""
        down_now = list(self.steps.down)
        if down:
            down_now.append(cable)
        else:
            down_now.remove(cable)
        self.steps.down = tuple(sorted(down_now))
        self.cable_events.append({"at_ns": self.now, "cable": list(cable), "down": down})
        if self.spec.timeline_corun:
            self._running_key = None  # _retime_all simulates the running set again
            return
        for job in self.jobs:
            if job.state == "running":
                factors = {gpu: self.slow[gpu] for gpu in job.gpus if gpu in self.slow}
                step_ns = self.steps.step_ns(job.spec, job.gpus, factors)
                if down and self.machine.mid_step:
                    self._fail_mid_step(job, cable, factors, step_ns)
                else:
                    self._retime(job, step_ns)

    def _fail_mid_step(self, job, cable, factors, step_ns):
        """``cable`` goes down inside the job's current step: that step is simulated with the cable failing at its
        offset into it (flow, ns3), and the steps after it run at ``step_ns``, without the cable. At a step's
        boundary, while restarting, writing a checkpoint or finishing a step that a cable already failed in, the
        job simply runs on at ``step_ns`` (:meth:`_retime`)."""
        if job.restoring_since is None and self.now >= job.progress_at:
            job.progress = min(job.segment_steps, job.progress + (self.now - job.progress_at) / job.step_ns)
            job.progress_at = self.now
        done = math.floor(job.progress)
        offset = int(round((job.progress - done) * job.step_ns))
        if (job.restoring_since is not None or self.now < job.progress_at or job.progress >= job.segment_steps
                or not 0 < offset < job.step_ns):
            self._retime(job, step_ns)
            return
        failed = self.steps.step_ns(job.spec, job.gpus, factors, failing=((cable, offset),))
        if failed == step_ns == job.step_ns:
            return  # a cable this job does not use
        job.retimes.append({"at_ns": self.now, "step_ns": step_ns, "failed_step_ns": failed, "offset_ns": offset})
        job.progress = done + 1  # the step the cable failed in ends when its simulation says
        job.progress_at = self.now + max(0, failed - offset)
        job.step_ns = step_ns
        job.epoch += 1
        self._push_compute_end(job, job.progress_at + int(round((job.segment_steps - job.progress) * step_ns)))

    def _job_mtbf_ns(self, job):
        """The mean time between failures that stop ``job`` where it is: one over the sum, over what can fail,
        of the units it uses over their MTBF."""
        failures = self.spec.failures
        if failures is None or not failures.mtbf_h:
            return None
        gpn = self.machine.gpus_per_node
        used = {"gpu": len(job.gpus), "link": len(job.gpus), "node": nodes_used(job.gpus, gpn)}
        if failures.nodes_per_switch:
            used["switch"] = len({gpu // gpn // failures.nodes_per_switch for gpu in job.gpus})
        rate = sum(used[kind] / (hours * 3600e9) for kind, hours in failures.mtbf_h.items())
        return 1.0 / rate

    def _interval(self, job):
        interval = self.spec.checkpoint.interval_steps
        if interval != YOUNG_DALY:
            return interval
        mtbf = self._job_mtbf_ns(job)
        if mtbf is None:
            return None  # no failures expected: no checkpoints
        tau = young_interval_ns(self._io_ns(job, "write"), mtbf)
        return max(1, int(round(tau / job.step_ns)))

    def _io_cap(self, job, what):
        """What ``job`` can write (``what``: "write") or read ("read") alone, bytes per ns: ``write_gb_per_s``
        (``read_gb_per_s``), and its nodes times ``node_write_gb_per_s`` (``node_read_gb_per_s``)."""
        checkpoint = self.spec.checkpoint
        cap = getattr(checkpoint, f"{what}_gb_per_s")
        per_node = getattr(checkpoint, f"node_{what}_gb_per_s")
        if per_node is not None:
            cap = min(cap, nodes_used(job.gpus, self.machine.gpus_per_node) * per_node)
        return cap * _GB / 1e9

    def _book_io(self, ends, event):
        """A shared storage moved these writes' (``event`` "written") or reads' ("restored") ends: book them
        (older bookings are dropped)."""
        for job, end in ends.items():
            job.io_version += 1
            self.push(end, event, (job, job.epoch, job.io_version))

    def _begin_segment(self, job, start):
        k = job.remaining if job.interval is None else min(job.interval, job.remaining)
        job.segment_steps = k
        job.segment_start = job.progress_at = start
        job.progress = 0.0
        job.write_ns = self._io_ns(job, "write") if k < job.remaining else 0
        self._push_compute_end(job, start + k * job.step_ns)

    def _push_compute_end(self, job, end):
        """The segment's steps end at ``end``: then its checkpoint write (alone: ``write_ns`` later; on shared
        storage: a write that starts then, at the rate the storage gives it)."""
        if self.storage is not None and job.write_ns:
            self.push(end, "computed", (job, job.epoch))
        else:
            self.push(end + job.write_ns, "segment", (job, job.epoch))

    def _retime(self, job, step_ns):
        """The job's step changes now (other jobs started or stopped beside it): the rest of its segment runs at
        the new step."""
        if step_ns == job.step_ns:
            return
        job.retimes.append({"at_ns": self.now, "step_ns": step_ns})
        if job.restoring_since is not None:  # still restarting: its segment begins at the new step
            job.step_ns = step_ns
            return
        if self.now > job.progress_at:
            job.progress = min(job.segment_steps, job.progress + (self.now - job.progress_at) / job.step_ns)
            job.progress_at = self.now
        job.step_ns = step_ns
        if job.progress >= job.segment_steps:
            return  # writing its checkpoint: the write does not change
        job.epoch += 1
        self._push_compute_end(job, job.progress_at + int(round((job.segment_steps - job.progress) * step_ns)))

    def _retime_all(self):
        """With ``timeline_corun``: every running job's step is its step beside the others running now."""
        running = [job for job in self.jobs if job.state == "running"]
        key = tuple((job.index, tuple(job.gpus)) for job in running)
        if key == self._running_key or not running:
            self._running_key = key
            return
        self._running_key = key
        items = [(job.spec, job.gpus, {g: self.slow[g] for g in job.gpus if g in self.slow}) for job in running]
        steps = self.steps.together_ns(items)
        for job in running:
            self._retime(job, steps[job.spec.name])

    def _segment_done(self, job):
        k = job.segment_steps
        job.done_steps += k
        job.useful_ns += k * job.step_ns
        if job.remaining:
            job.checkpoint_ns += self._io_ns(job, "write") if self.storage is None else self.now - job.write_start
            self._begin_segment(job, self.now)
        else:
            self._stop(job, "done")
            job.end = self.now

    def _stop(self, job, state):
        for storage, event in ((self.storage, "written"), (self.read_storage, "restored")):
            if storage is not None and job in storage.writes:  # cut short: the others speed up
                self._book_io(storage.stop(job, self.now), event)
        if job.restoring_since is not None:
            job.restart_ns += self.now - job.restoring_since
            job.restoring_since = None
        job.epoch += 1
        self.free.update(gpu for gpu in job.gpus if gpu not in self.down)
        job.gpus = None
        job.state = state
        if state == "queued":
            job.queued_since = self.now

    def _fail(self, kind, index):
        """``kind`` ``index`` fails: every job on its GPUs stops (``link: G``, GPU G's own link, stops its job as a
        failed GPU does; a cable named by its ends, ``link: [a, b]``, is routed around instead: :meth:`_cable`);
        they stay down for ``repair_h``."""
        gpus = self._gpus_of(kind, index)
        self.failures.append({"at_ns": self.now, "kind": kind, "index": index})
        for job in self.jobs:
            if job.state == "running" and any(gpu in job.gpus for gpu in gpus):
                job.failures += 1
                if job.restoring_since is None:  # restoring, it had no work since its checkpoint to lose
                    job.lost_ns += max(0, self.now - job.segment_start)
                self._stop(job, "queued")
        repair_ns = int(round(self.spec.failures.repair_h * 3600e9))
        if repair_ns:
            for gpu in gpus:
                self.down[gpu] = self.down.get(gpu, 0) + 1
                self.free.discard(gpu)
            self.push(self.now + repair_ns, "repair", gpus)

    # ------------------------------------------------------------------ scheduling
    def _reference_step_ns(self, job):
        """The job's step on the fewest nodes of an empty cluster: the rate its goodput is measured against."""
        every = set(range(self.machine.total_gpus))
        down, self.steps.down = self.steps.down, ()  # the reference is the intact machine
        try:
            return self.steps.step_ns(job.spec, _pack(job.spec.gpus, every, self.machine.gpus_per_node))
        finally:
            self.steps.down = down

    def _estimate_ns(self, job, gpus=None):
        return job.remaining * (self._reference_step_ns(job) if gpus is None else self.steps.step_ns(job.spec, gpus))

    def _place(self, job):
        if job.spec.gpus > self.machine.total_gpus:
            return None
        return place(self.spec.placement, job.spec, self.free, self.machine.gpus_per_node, self.placement_rng)

    def _schedule(self):
        queue = [job for job in self.jobs if job.state == "queued"]
        if not queue:
            return
        if self.spec.scheduler == "sjf":
            queue.sort(key=lambda job: (self._estimate_ns(job), job.spec.arrival_ns, job.index))
        else:
            queue.sort(key=lambda job: (job.spec.arrival_ns, job.index))
        while queue:
            gpus = self._place(queue[0])
            if gpus is None:
                break
            self._start(queue.pop(0), gpus)
        if queue and self.spec.scheduler == "backfill":
            self._backfill(queue)

    def _backfill(self, queue):
        head, rest = queue[0], queue[1:]
        shadow, extra = self._reservation(head)
        for job in rest:
            gpus = self._place(job)
            if gpus is None:
                continue
            ends_before = shadow is not None and self.now + self._estimate_ns(job, gpus) <= shadow
            if ends_before or len(gpus) <= extra:
                if not ends_before:
                    extra -= len(gpus)
                self._start(job, gpus)

    def _reservation(self, head):
        """When the head job can start (running jobs' estimated ends) and how many GPUs are spare then."""
        available = len(self.free)
        ends = sorted((job.segment_start + self._estimate_ns(job, job.gpus), len(job.gpus))
                      for job in self.jobs if job.state == "running")
        for end, count in ends:
            available += count
            if available >= head.spec.gpus:
                return end, available - head.spec.gpus
        return None, 0

    # ------------------------------------------------------------------ report
    def _optimum(self, job):
        """Young's and Daly's intervals for the job where it first ran (under random failures)."""
        if job.mtbf_ns is None:
            return {}
        delta = self._io_ns(job, "write")
        out = {"job_mtbf_ns": int(job.mtbf_ns), "young_interval_ns": int(young_interval_ns(delta, job.mtbf_ns)),
               "daly_interval_ns": int(daly_interval_ns(delta, job.mtbf_ns))}
        if job.interval and job.placements:  # the closed form at the interval used, alone on the storage
            restart = self.spec.checkpoint.restart_s * 1e9 + self._io_ns(job, "read")
            tau = job.interval * job.placements[0]["step_ns"]
            out["daly_goodput"] = daly_goodput(tau, delta, restart, job.mtbf_ns)
        return out

    def _report(self, end_ns):
        rows = []
        for job in self.jobs:
            reference = self._reference_step_ns(job) if job.first_start is not None else None
            held = (job.end if job.end is not None else end_ns) - job.first_start if job.first_start is not None \
                else 0
            rows.append({
                "job": job.spec.name, "state": job.state, "arrival_ns": job.spec.arrival_ns,
                "first_start_ns": job.first_start, "end_ns": job.end,
                "completion_ns": None if job.end is None else job.end - job.spec.arrival_ns,
                "steps": job.spec.steps, "useful_steps": job.done_steps, "failures": job.failures,
                "interval_steps": job.interval, "checkpoint_bytes": job.checkpoint_bytes,
                "checkpoint_write_ns": self._io_ns(job, "write"), "useful_ns": job.useful_ns,
                "lost_ns": job.lost_ns, "checkpoint_ns": job.checkpoint_ns, "restart_ns": job.restart_ns,
                "queued_ns": job.queued_ns, "held_ns": held,
                "reference_step_ns": reference, **self._optimum(job),
                "goodput_steps_per_h": job.done_steps / (held / 3600e9) if held else None,
                "goodput": job.done_steps * reference / held if held else None, "placements": job.placements[:20],
                "placements_total": len(job.placements), "step_changes": job.retimes[:20],
                "step_changes_total": len(job.retimes)})
        gpu_ns = self.machine.total_gpus * end_ns
        useful_gpu_ns = sum(row["useful_steps"] * row["reference_step_ns"] * job.spec.gpus
                            for row, job in zip(rows, self.jobs) if row["reference_step_ns"])
        done = [row["completion_ns"] for row in rows if row["completion_ns"] is not None]
        return {"end_ns": end_ns, "scheduler": self.spec.scheduler, "placement": self.spec.placement,
                "failures": len(self.failures), "failure_events": self.failures[:50],
                "cable_events": self.cable_events[:50],
                "jobs_done": len(done), "mean_completion_ns": int(sum(done) / len(done)) if done else None,
                "cluster_goodput": useful_gpu_ns / gpu_ns if gpu_ns else None, "jobs": rows}
