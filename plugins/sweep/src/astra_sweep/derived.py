"""Columns a sweep derives from a point's row and the user's price table: what its tokens cost.

The simulator gives tokens/s per GPU (``stats.throughput`` of an LLM step; a serving run's output tokens/s over
its GPUs); what a GPU-hour costs is the user's, not the simulator's, so it comes from a price table the spec
names (``prices: gpu_prices.yaml``, relative to the spec's folder)::

    prices:
      hgx-h100: {usd_per_gpu_hour: 2.69, source: "RunPod on-demand H100 SXM (deploybase.ai, 2026)"}
      mi300x:   {usd_per_gpu_hour: 2.00, assumption: "a guess: replace it with your quote"}

(examples/sweeps/gpu_prices.yaml is a whole one, each price with its source.)

Every price says where it comes from (``source``) or that it is a guess the user must replace (``assumption``);
a row priced by an assumption has ``price_assumed`` true and the sweep warns once per such platform. A row gets
``usd_per_gpu_hour`` and ``usd_per_million_tokens = usd_per_gpu_hour / 3600 / tokens_per_s_per_gpu * 1e6``. The
columns are recomputed from the table on every run of the sweep, the earlier rows' too: edit a price and run the
same command again, and the costs change without simulating anything.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from astra_sim.errors import ConfigError

#: the derived columns and their types (:mod:`.results` types columns it does not know by name with these)
COLUMN_TYPES = {"usd_per_gpu_hour": "float", "usd_per_million_tokens": "float", "price_assumed": "bool"}
PRICE_KEYS = ("usd_per_gpu_hour", "source", "assumption")
#: more than any GPU has rented for per hour: a price above it is a typo (cents, or a whole server)
MAX_USD_PER_GPU_HOUR = 1000.0


@dataclass(frozen=True)
class Price:
    """One platform's price: dollars per GPU-hour, and where it comes from (``assumed``: a guess to replace)."""

    usd_per_gpu_hour: float
    basis: str
    assumed: bool


@dataclass(frozen=True)
class PriceTable:
    path: str
    prices: dict  # platform name (lower case) -> Price

    def get(self, platform):
        return self.prices.get(str(platform).strip().lower()) if platform else None


def load_prices(value, spec_path, known_platforms=None) -> PriceTable:
    """The spec's ``prices:`` (a file name, relative to the spec's folder) read and checked; a one-line
    ConfigError naming the file and the key. ``known_platforms``: the registered names a price must name."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{spec_path}: prices must name a price table file (YAML), got {value!r}")
    path = value if os.path.isabs(value) else os.path.join(os.path.dirname(os.path.abspath(spec_path)), value)
    return read_prices(path, known_platforms)


def read_prices(path, known_platforms=None) -> PriceTable:
    """The price table file ``path`` read and checked (a sweep spec's ``prices:``, ``astra search --prices``)."""
    from astra_sim.safeio import load_yaml

    return parse_prices(load_yaml(path, "price table"), path, known_platforms)


def parse_prices(data, path, known_platforms=None) -> PriceTable:
    """The :class:`PriceTable` of the mapping ``data`` read from ``path``."""
    if not isinstance(data, dict) or set(data) != {"prices"} or not isinstance(data["prices"], dict):
        raise ConfigError(f"{path}: a price table is a mapping with one key, prices: {{platform: {{usd_per_gpu_hour: "
                          "N, source: TEXT or assumption: TEXT}}}}")
    known = {str(k).lower() for k in known_platforms} if known_platforms is not None else None
    prices = {}
    for name, entry in data["prices"].items():
        where = f"{path}: prices.{_short(name)}"
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: a platform name (as astra platforms lists it) is expected")
        key = name.strip().lower()
        if known is not None and key not in known:
            from astra_sim.cliutil import did_you_mean

            raise ConfigError(f"{where}: no such platform{did_you_mean(key, known)} (see astra platforms)")
        if key in prices:
            raise ConfigError(f"{where}: priced twice")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected {{usd_per_gpu_hour: N, source: TEXT}}, got {_short(entry)}")
        unknown = [k for k in entry if k not in PRICE_KEYS]
        if unknown:
            raise ConfigError(f"{where}: unknown key {_short(unknown[0])} (known: {', '.join(PRICE_KEYS)})")
        usd = entry.get("usd_per_gpu_hour")
        if (isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd <= 0
                or usd > MAX_USD_PER_GPU_HOUR):
            raise ConfigError(f"{where}.usd_per_gpu_hour: expected dollars per GPU-hour, a number > 0 and <= "
                              f"{MAX_USD_PER_GPU_HOUR:g}, got {_short(usd)}")
        texts = {k: entry[k] for k in ("source", "assumption") if k in entry}
        if len(texts) != 1 or not isinstance(next(iter(texts.values())), str) or not next(iter(texts.values())).strip():
            raise ConfigError(f"{where}: give exactly one of source (where the price comes from) or assumption (why "
                              "it is a guess the user must replace), as non-empty text")
        kind, text = next(iter(texts.items()))
        prices[key] = Price(float(usd), text.strip(), kind == "assumption")
    return PriceTable(path, prices)


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def tokens_per_s_per_gpu(row):
    """The row's tokens/s per GPU: an LLM step's (``tokens_per_s_per_gpu``), or a serving run's output
    tokens/s over its GPUs; None when the row has neither."""
    value = row.get("tokens_per_s_per_gpu")
    if _positive(value):
        return float(value)
    total, gpus = row.get("throughput_tokens_per_s"), row.get("gpus")
    if _positive(total) and _positive(gpus):
        return float(total) / float(gpus)
    return None


def _positive(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0)


def add_cost(row, platform, table):
    """Set the row's cost columns from ``table``'s price for ``platform`` (None when either is missing: a
    point that failed, or a platform the table does not price); returns the row."""
    price = table.get(platform)
    rate = tokens_per_s_per_gpu(row) if str(row.get("status") or "").startswith("ok") else None
    row["usd_per_gpu_hour"] = price.usd_per_gpu_hour if price else None
    row["price_assumed"] = price.assumed if price else None
    row["usd_per_million_tokens"] = (price.usd_per_gpu_hour / 3600.0 / rate * 1e6
                                     if price is not None and rate is not None else None)
    return row


def point_platform(point):
    """The platform a spec's point runs on (``run.platform``, or a serving point's ``workload.serve.platform``)."""
    if point.workload_kind == "serve":
        return point.workload.get("platform")
    return point.run.get("platform")


def price_warnings(table, platforms):
    """One line per platform of the sweep priced by an assumption, and one for those without a price."""
    lines = []
    missing = []
    for name in dict.fromkeys(p for p in platforms if p):
        price = table.get(name)
        if price is None:
            missing.append(str(name))
        elif price.assumed:
            lines.append(f"{table.path}: the price of {name} (${price.usd_per_gpu_hour:g}/GPU-hour) is an assumption "
                         "(its note there says why): replace it with yours; its rows have price_assumed true")
    if missing:
        lines.append(f"{table.path}: no price for {', '.join(missing)}: their cost columns stay empty")
    return lines


def pricer(spec, columns, types, warn):
    """``priced(row)`` for the rows of the sweep ``spec``: the row with its cost columns when the spec names a
    price table (their names are added to ``columns`` before ``status``, their types to ``types``, and ``warn``
    gets :func:`price_warnings`' lines); else the row as it is."""
    if spec.prices is None:
        return lambda row: row
    at = columns.index("status")
    columns[at:at] = list(COLUMN_TYPES)
    types.update(COLUMN_TYPES)
    platform_of = {p.id: point_platform(p) for p in spec.points}
    for line in price_warnings(spec.prices, platform_of.values()):
        warn(line)
    return lambda row: add_cost(row, platform_of.get(row["point"]), spec.prices)


__all__ = ["COLUMN_TYPES", "Price", "PriceTable", "add_cost", "load_prices", "parse_prices", "point_platform",
           "price_warnings", "pricer", "read_prices", "tokens_per_s_per_gpu"]
