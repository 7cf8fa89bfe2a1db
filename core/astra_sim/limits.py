"""The range every number in a configuration file must lie in: what hardware can have.

The reference accepts any number, so a sign slip (``latency: -500``) or a stray exponent
(``bandwidth: 1e308``) runs and prints a time that means nothing, or wraps around. Each key's range
is wide enough for any machine being built or planned, and narrow enough to catch such slips; a
value outside it is a :class:`~astra_sim.errors.ConfigError` naming the file, the key and the
range. The kernel checks the system JSON; the network and memory plugins check their own files
with :func:`check_number`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from astra_sim.errors import ConfigError


@dataclass(frozen=True)
class Limit:
    """``low`` <= value <= ``high`` (``low`` excluded when ``low_open``), in ``unit``."""

    low: float
    high: float
    unit: str
    low_open: bool = False
    integer: bool = False

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
#: Most NPUs a run may have (the product of a network's dimensions, a compact workload's ``npus``):
#: per-rank tables are allocated for every NPU, so a stray exponent must not reach the allocator.
MAX_TOTAL_NPUS = 10_000_000
#: Ranges of the numeric keys of the reference's configuration files.
LIMITS = {
    # system JSON
    "endpoint-delay": Limit(0, SECOND_NS, "ns per packet at each endpoint"),
    # (the reference reads these two into ints, truncating a fraction; so does config.py)
    "active-chunks-per-dimension": Limit(1, 1e6, "chunks"),
    "preferred-dataset-splits": Limit(1, 1e6, "chunks per collective"),
    "local-mem-bw": Limit(0, 1e6, "GB/s, 10^9 bytes/s"),
    "peak-perf": Limit(0, 1e6, "TFLOP/s"),
    "local-reduction-delay": Limit(0, SECOND_NS, "ns"),
    "L": Limit(0, SECOND_NS, "ns, LogGP latency"),
    "o": Limit(0, SECOND_NS, "ns, LogGP overhead"),
    "g": Limit(0, SECOND_NS, "ns, LogGP gap"),
    "G": Limit(0, SECOND_NS, "ns per byte, LogGP gap per byte"),
    # network YAML (one entry per dimension)
    "npus_count": Limit(1, 1e6, "NPUs in the dimension", integer=True),
    "bandwidth": Limit(0, 1e6, "GB/s per link and direction, GB = 2^30 bytes", low_open=True),
    "latency": Limit(0, SECOND_NS, "ns per link traversal"),
    # remote-memory JSON
    "remote-mem-latency": Limit(0, SECOND_NS, "ns"),
    "remote-mem-bw": Limit(1, 1e6, "bytes/ns, i.e. decimal GB/s"),
    "num-nodes": Limit(1, 1e6, "nodes", integer=True),
    "num-npus-per-node": Limit(1, 1e6, "NPUs per node", integer=True),
}


def check_number(where, key, value, limit=None, *, label=None):
    """``value`` if it is a finite number in ``limit`` (default: ``LIMITS[key]``), else a
    ConfigError: ``<where>: key '<label>' must be <range>, got <value>``."""
    limit = limit or LIMITS[key]
    label = label or key
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok and limit.integer and not float(value).is_integer():
        ok = False
    if not ok or not limit.admits(value):
        raise ConfigError(f"{where}: key {label!r} must be {limit.describe()}, got {value!r}")
    return value
