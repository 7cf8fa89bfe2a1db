"""The event loop of a built run, and the checks after it: every rank finished (else a deadlock naming the stuck
ranks) and every message met its receive (else an error, or a warning with ``allow_unmatched``). A folded run that
fails either is simulated again unfolded (:class:`~astra_sim.errors.FoldAbandoned`) to name real ranks."""

from __future__ import annotations

from astra_sim.errors import DeadlockError, FoldAbandoned
from astra_sim.unmatched import describe_unmatched, lines as unmatched_lines, unmatched_error, unmatched_warning


def run_events(engine, workloads, folded, drive=None):
    """Start every simulated rank (in rank order) and run the engine (or ``drive()`` it) until no event is left."""
    for workload in workloads:
        if workload is not None:
            if folded:
                engine.fold.start_rank(workload.rank)
            workload.start()
    (engine.run if drive is None else drive)()


def check_all_finished(engine, workloads, matcher, folded):
    """A :class:`DeadlockError` naming the stuck ranks (and unmatched messages) when a rank has not finished."""
    stuck = [w for w in workloads if w is not None and w.finish_ns is None]
    if not stuck:
        return
    if folded:
        raise FoldAbandoned("the run deadlocked; simulated unfolded to name every stuck rank exactly")
    lines = [
        f"deadlock: no event is left at {engine.now} ns but {len(stuck)} of "
        f"{sum(w is not None for w in workloads)} simulated ranks have not finished:"
    ]
    for workload in stuck[:8]:
        lines.append(f"  rank {workload.rank} ({workload.path}): {workload.stuck_description()}")
    if len(stuck) > 8:
        lines.append(f"  ... and {len(stuck) - 8} more ranks")
    unmatched = describe_unmatched(matcher.unmatched(), workloads)
    if unmatched:
        lines.append(f"  {len(unmatched)} unmatched message(s), e.g.:")
        lines.extend("  " + text for text in unmatched_lines(unmatched, 5))
    raise DeadlockError("\n".join(lines))


def check_all_matched(workloads, matcher, folded, allow_unmatched, warn):
    """Any message still waiting is a send never received (or the reverse): an error, or with ``allow_unmatched``
    a warning and the described messages. A folded run's messages are keyed at representatives: it runs again
    unfolded to name the real ranks."""
    waiting = matcher.unmatched()
    if not waiting:
        return []
    if folded:
        raise FoldAbandoned("the run ended with unmatched messages; simulated unfolded to name them exactly")
    messages = describe_unmatched(waiting, workloads)
    if not allow_unmatched:
        raise unmatched_error(messages)
    warn(unmatched_warning(messages))
    return messages
