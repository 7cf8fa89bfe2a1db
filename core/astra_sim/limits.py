"""The range every number of a configuration file must lie in: what hardware can have.

The reference accepts any number, so a sign slip (``latency: -500``) or a stray exponent (``bandwidth: 1e308``) runs
and prints a meaningless or wrapped time. Each range holds any machine built or planned and catches such slips; a
value outside is a :class:`~astra_sim.errors.ConfigError` naming file, key and range (:func:`check_number`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from astra_sim.errors import ConfigError, SimulationError


@dataclass(frozen=True)
class Limit:
    """``low`` <= value <= ``high`` (``low`` excluded when ``low_open``), in ``unit``."""

    low: float
    high: float
    unit: str
    low_open: bool = False
    integer: bool = False
    #: below this the value is legal but absurd (under 1 B/s): a warning, once, saying ``warn_note`` (it in words)
    warn_below: float = 0.0
    warn_note: str = ""

    def admits(self, value):
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def describe(self):
        kind = "an integer" if self.integer else "a number"
        low = f"> {_show(self.low)}" if self.low_open else f">= {_show(self.low)}"
        return f"{kind} {low} and <= {_show(self.high)} ({self.unit})"


def _show(x):
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


SECOND_NS = 1e9
#: The latest time a report holds (readers of its JSON and sweeps' Parquet keep int64 ns: about 292 years); a node
#: ending later is an error naming it, never a wrapped number.
MAX_TIME_NS = (1 << 63) - 1
#: A single node running longer than this (a year) is legal but almost surely a slip: a warning, once.
LONG_STEP_NS = 365 * 24 * 3600 * 10**9
#: Most NPUs a run may have: per-rank tables are allocated for every NPU, so a stray exponent must not reach them.
MAX_TOTAL_NPUS = 10_000_000


def env_limit(name, default):
    """A bound an environment variable changes, read once at import (plugins define theirs with it)."""
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        raise ConfigError(f"environment variable {name} must be an integer, got {os.environ[name]!r}") from None


#: Ranges of the numeric keys of the reference's configuration files.
LIMITS = {
    # system JSON
    "endpoint-delay": Limit(0, SECOND_NS, "ns per packet at each endpoint"),
    # (the reference reads these two into ints, truncating a fraction; so does config.py)
    "active-chunks-per-dimension": Limit(1, 1e6, "chunks"),
    "preferred-dataset-splits": Limit(1, 1e6, "chunks per collective"),
    "local-mem-bw": Limit(0, 1e6, "GB/s, 10^9 bytes/s", warn_below=1e-9, warn_note="1 byte/s"),
    "peak-perf": Limit(0, 1e6, "TFLOP/s"),
    "local-reduction-delay": Limit(0, SECOND_NS, "ns"),
    "L": Limit(0, SECOND_NS, "ns, LogGP latency"),
    "o": Limit(0, SECOND_NS, "ns, LogGP overhead"),
    "g": Limit(0, SECOND_NS, "ns, LogGP gap"),
    "G": Limit(0, SECOND_NS, "ns per byte, LogGP gap per byte"),
    # network YAML (one entry per dimension)
    "npus_count": Limit(1, 1e6, "NPUs in the dimension", integer=True),
    "bandwidth": Limit(0, 1e6, "GB/s per link and direction, GB = 2^30 bytes", low_open=True, warn_below=2**-30,
                       warn_note="1 byte/s"),
    "latency": Limit(0, SECOND_NS, "ns per link traversal"),
    # remote-memory JSON
    "remote-mem-latency": Limit(0, SECOND_NS, "ns"),
    "remote-mem-bw": Limit(1, 1e6, "bytes/ns, i.e. decimal GB/s"),
    "num-nodes": Limit(1, 1e6, "nodes", integer=True),
    "num-npus-per-node": Limit(1, 1e6, "NPUs per node", integer=True),
    # a model's achieved fraction of a peak (compute or memory efficiency), for plugins' keys of that kind
    "utilisation": Limit(0, 1, "fraction of the peak", low_open=True, warn_below=1e-6,
                         warn_note="a millionth of the peak"),
}


def check_number(where, key, value, limit=None, *, label=None):
    """``value`` if a finite number in ``limit`` (default ``LIMITS[key]``), else a ConfigError naming the range."""
    limit = limit or LIMITS[key]
    label = label or key
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok and limit.integer and not float(value).is_integer():
        ok = False
    if not ok or not limit.admits(value):
        raise ConfigError(f"{where}: key {label!r} must be {limit.describe()}, got {value!r}")
    if 0 < value < limit.warn_below:
        _warn_once(f"{where}: key {label!r} is {value!r} ({limit.unit}), under {limit.warn_note}: the times it sets "
                   "are absurdly long (a slip?)")
    return value


_WARNED = set()


def _warn_once(message):
    """An absurd but legal value: said once per process (a sweep reads the same file at every point)."""
    if message not in _WARNED:
        _WARNED.add(message)
        from astra_sim.cliutil import warning

        warning(message)


def check_step(rank, node, start_ns, end_ns, warn):
    """A finished node past :data:`MAX_TIME_NS` (an error) or :data:`LONG_STEP_NS` (a warning, once); called only so."""
    where = f"{node.where} of rank {rank}"
    if end_ns > MAX_TIME_NS:
        raise time_overflow(where)
    if "long step" not in _WARNED:
        _WARNED.add("long step")
        warn(f"{where} runs {(end_ns - start_ns) / LONG_STEP_NS:,.0f} years (more than one); check the duration, "
             "sizes, bandwidths and rates that time it")


def time_overflow(where):
    """The SimulationError of a time past :data:`MAX_TIME_NS` at ``where`` (a node, a phase)."""
    return SimulationError(f"{where} ends after {MAX_TIME_NS:,} ns (2^63-1, 292 years), the latest time a report "
                           "holds: a duration, size, bandwidth or latency that times it is out of range")
