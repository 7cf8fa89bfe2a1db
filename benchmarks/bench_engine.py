"""Micro-benchmark: empty events per second through the event engine.

Two patterns: every event at its own time (worst case for the time buckets)
and 64 events per distinct time (what collectives look like). The target is
at least 1 million empty events per second on the project's 2-core machine.

    python benchmarks/bench_engine.py [--events N]
"""

import argparse
import time

from astra_sim.engine import EventEngine


def run(events, per_time):
    engine = EventEngine()
    remaining = [events]
    schedule = engine.schedule

    def tick(_arg):
        # Each event schedules its successor, like a chain of packet steps.
        if remaining[0] > 0:
            remaining[0] -= 1
            schedule(1 if per_time == 1 else 0, tick, None)

    def step(_arg):
        if remaining[0] > 0:
            for _ in range(per_time):
                remaining[0] -= 1
                schedule(0, _noop, None)
            schedule(1, step, None)

    start = time.perf_counter()
    if per_time == 1:
        engine.schedule(0, tick, None)
    else:
        engine.schedule(0, step, None)
    engine.run()
    elapsed = time.perf_counter() - start
    return engine.events_run, elapsed


def _noop(_arg):
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    args = parser.parse_args()
    for per_time in (1, 64):
        count, elapsed = run(args.events, per_time)
        print(f"{per_time:>3} event(s) per distinct time: {count:,} events in {elapsed:.3f} s "
              f"= {count / elapsed / 1e6:.2f} M events/s")


if __name__ == "__main__":
    main()
