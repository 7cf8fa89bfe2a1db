"""``--power-timeline PATH.json``: power over time as Chrome trace counters (the Perfetto UI opens it).

One counter track per class of ranks whose activity is the same (a folded run's representatives: every rank of the
class draws what the track shows), labelled with its ranks, and one ``cluster`` track with every GPU's power added
up. A rank's power at an instant is that of the highest-power activity it runs then (``op_class_power_w``: a compute
class, exposed communication, remote memory) or its idle power; communication beside compute shows as the compute.
The step's energy comes from the breakdown (``stats.energy``); this file is for looking at the shape: the compute
and communication swings, the bubbles. Times are microseconds with three decimals (exact nanoseconds).
"""

from __future__ import annotations

import json
import os

from astra_sim.outputs import OutputFormat, check_writable_folder


def _us(ns):
    return f"{ns // 1000}.{ns % 1000:03d}"


def _name(pid, name):
    return f'{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":{json.dumps(name)}}}}}'


def _counter(pid, t_ns, watts):
    return f'{{"ph":"C","name":"power W","pid":{pid},"ts":{_us(t_ns)},"args":{{"W":{watts:.3f}}}}}'


def rank_power_steps(analysis, rep, watts):
    """``[(t_ns, W), ...]``: the representative's power from 0 to its finish (the last entry: idle at the finish),
    by the rule of ``--timeline``'s power lane (:func:`astra_analysis.timeline.power_steps`: one place for it)."""
    from astra_analysis.timeline import power_steps

    view = analysis.view(rep)
    return power_steps(analysis, rep, view.records(), watts, view.finish_ns or 0)


def cluster_steps(classes):
    """Every GPU's power added up: ``classes`` is ``[(count, steps)]``."""
    changes = {}
    for count, steps in classes:
        previous = 0.0
        for t, w in steps:
            changes[t] = changes.get(t, 0.0) + count * (w - previous)
            previous = w
    total, out = 0.0, []
    for t in sorted(changes):
        total += changes[t]
        out.append((t, total))
    return out


class PowerTimeline(OutputFormat):
    def __init__(self, path):
        self.path = path

    def start(self, run):
        run.record_spans()

    def finish(self, run, report):
        from astra_sim.humanize import rank_ranges
        from astra_sim.safeio import write_or_recover

        from astra_analysis.views import analysis_of

        state = run.plugin_state.get("energy")
        analysis = analysis_of(run)
        if not state or analysis is None:
            report.warnings.append(f"--power-timeline {self.path}: no power for this run (it needs the gpu compute "
                                   "model on a GPU with power data); nothing written")
            return
        watts = state["op_class_power_w"]
        symmetry = run.symmetry
        members = {}
        for rank in range(run.total_npus):
            rep = symmetry.representative(rank) if symmetry is not None else rank
            members.setdefault(rep, []).append(rank)
        events = [_name(0, "cluster power (all GPUs)")]
        classes = []
        for pid, (rep, ranks) in enumerate(sorted(members.items()), start=1):
            steps = rank_power_steps(analysis, rep, watts)
            classes.append((len(ranks), steps))
            events.append(_name(pid, f"ranks {rank_ranges(ranks)} power, each" if len(ranks) > 1
                                else f"rank {ranks[0]} power"))
            events.extend(_counter(pid, t, w) for t, w in steps)
        events.extend(_counter(0, t, w) for t, w in cluster_steps(classes))
        text = '{"displayTimeUnit":"ns","traceEvents":[\n' + ",\n".join(events) + "\n]}\n"
        # a late failure (a full disk) keeps the timeline in a recovered file; the ConfigError says where
        write_or_recover(self.path, text.encode("utf-8"), "astra run", "--power-timeline")
        report.settings["power_timeline"] = {"path": self.path, "tracks": len(classes) + 1, "events": len(events)}


def power_timeline(options, total_npus):
    path = options.get("power_timeline")
    if not path:
        return None
    check_writable_folder(os.path.dirname(os.path.abspath(path)), f"--power-timeline {path}")
    return PowerTimeline(path)


__all__ = ["PowerTimeline", "power_timeline", "rank_power_steps", "cluster_steps"]
