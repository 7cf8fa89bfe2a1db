"""The requests a deployment serves: read from a trace file (JSONL or CSV) or generated (Poisson or gamma
arrivals at a QPS, token lengths from a distribution), seeded and reproducible. Times are int ns.

Trace formats (the columns are recognised by name; see docs/serving.md):

* JSONL, one object a line: ``arrival_s`` (or ``arrival_ns``), ``prompt_tokens``, ``output_tokens`` and
  optionally ``priority`` (int, lower is served first under ``--policy priority``), ``prefix_group`` (str:
  requests of one group share their first ``prefix_tokens`` prompt tokens, for prefix caching).
* CSV with a header, the same column names; or the Azure LLM inference trace (2023/2024,
  ``TIMESTAMP,ContextTokens,GeneratedTokens``, TIMESTAMP a date-time such as ``2023-11-16 18:15:46.6805900``);
  or BurstGPT (``Timestamp,...,Request tokens,Response tokens,...``, Timestamp in seconds).
  Arrivals of absolute time stamps count from the first row's.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass

from astra_sim.errors import ConfigError
from astra_sim.limits import env_limit
from astra_sim.safeio import brief

NS = 1_000_000_000
# Bounds on what a generator or reader builds, checked before the work starts (each error names its variable).
#: Most requests ``astra serve`` generates or reads from a trace (~310 bytes of memory each: 620 MB).
MAX_REQUESTS = env_limit("ASTRA_MAX_REQUESTS", 2_000_000)
#: Largest request trace ``astra serve`` reads (line by line: its memory follows the requests kept).
MAX_TRACE_BYTES = env_limit("ASTRA_MAX_TRACE_BYTES", 8 << 30)
#: time stamps are int64 ns (about 292 years either side of zero), as in a Chakra trace
MAX_ABS_NS = 2 ** 63
#: Longest line of a trace (a request is a line of ~100 characters).
MAX_LINE_CHARS = 1 << 20
#: Peak memory per request while a trace is read, for the limit's message: measured with tracemalloc over 10^5
#: requests of a 6.8 MB JSONL trace (306 bytes each at the peak, 244 kept; the whole-text reader before: 10.7 KB).
REQUEST_BYTES = 310


@dataclass(slots=True)
class Request:
    """One request, and what the simulation records about it."""

    id: int
    arrival_ns: int
    prompt_tokens: int
    output_tokens: int
    priority: int = 0
    prefix_group: str | None = None
    prefix_tokens: int = 0
    # --- filled in by the simulation
    scheduled_ns: int | None = None      # first iteration that computed any of it
    first_token_ns: int | None = None
    finish_ns: int | None = None
    preemptions: int = 0
    replica: int | None = None
    energy_share_mj: float = 0.0         # the IT energy charged to it so far (energy.py)
    energy_mj: int | None = None         # its IT energy once the run is over (None: no power data)


# ------------------------------------------------------------------------------------------------ traces
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_BURST = ("Timestamp", "Request tokens", "Response tokens")


def parse_azure_timestamp(text):
    """``2023-11-16 18:15:46.6805900`` (up to 9 fractional digits) -> ns since the epoch (UTC assumed)."""
    from datetime import datetime, timezone

    text = text.strip()
    main, _, frac = text.partition(".")
    if frac and not frac.isdigit():
        raise ValueError(f"bad fractional seconds in {brief(text)}")
    try:
        moment = datetime.strptime(main.replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"expected a date-time like 2023-11-16 18:15:46.6805900, got {brief(text)}") from None
    return int(moment.timestamp()) * NS + int((frac + "000000000")[:9] or 0)


def _int_field(value, name):
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {brief(value)}")
    if isinstance(value, str):
        value = value.strip()
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {brief(value)}") from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{name} must be an integer, got {brief(value)}")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {brief(value)}")
    return value


def _seconds_to_ns(value, name):
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number of seconds, got {brief(value)}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, got {brief(value)}") from None
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be finite, got {brief(value)}")
    if not math.isfinite(seconds * NS):  # e.g. 1e300 s: no integer of ns (the range check is the caller's)
        raise ValueError(f"{name} is out of range, got {brief(value)}")
    return round(seconds * NS)


def _row_request(row, index, columns):
    """A Request from one record (a dict) of a trace; ValueError says what is wrong."""
    kind = columns
    if kind == "azure":
        arrival = parse_azure_timestamp(str(row["TIMESTAMP"]))
        prompt, output = _int_field(row["ContextTokens"], "ContextTokens"), _int_field(row["GeneratedTokens"],
                                                                                         "GeneratedTokens")
        extra = {}
    elif kind == "burst":
        arrival = _seconds_to_ns(row["Timestamp"], "Timestamp")
        prompt, output = (_int_field(row["Request tokens"], "Request tokens"),
                          _int_field(row["Response tokens"], "Response tokens"))
        extra = {}
    else:
        if row.get("arrival_ns") not in (None, ""):
            arrival = _int_field(row["arrival_ns"], "arrival_ns")
        elif row.get("arrival_s") not in (None, ""):
            arrival = _seconds_to_ns(row["arrival_s"], "arrival_s")
        else:
            raise ValueError("missing arrival_s (or arrival_ns)")
        for key in ("prompt_tokens", "output_tokens"):
            if row.get(key) in (None, ""):
                raise ValueError(f"missing {key}")
        prompt, output = _int_field(row["prompt_tokens"], "prompt_tokens"), _int_field(row["output_tokens"],
                                                                                       "output_tokens")
        extra = {}
        if row.get("priority") not in (None, ""):
            extra["priority"] = _int_field(row["priority"], "priority")
        if row.get("prefix_group") not in (None, ""):
            extra["prefix_group"] = str(row["prefix_group"])
            extra["prefix_tokens"] = _int_field(row.get("prefix_tokens", 0) or 0, "prefix_tokens")
            if not 0 <= extra["prefix_tokens"] <= prompt:
                raise ValueError(f"prefix_tokens must be between 0 and prompt_tokens ({prompt}), got "
                                 f"{extra['prefix_tokens']}")
    if abs(arrival) >= MAX_ABS_NS:
        raise ValueError(f"arrival time {float(arrival):.4g} ns is out of range (an int64 of ns: about 292 "
                         "years either side of zero)")
    if prompt < 1:
        raise ValueError(f"prompt tokens must be >= 1, got {prompt}")
    if output < 1:
        raise ValueError(f"output tokens must be >= 1, got {output}")
    return Request(index, arrival, prompt, output, **extra)


def read_trace(path, max_context=None):
    """The requests of a trace file, in arrival order (ids in file order). Errors are one line naming the file
    and line: a negative arrival, a request longer than ``max_context`` tokens (prompt + output), a missing or
    malformed field, a line nested deeper or longer than the readers accept, more requests than
    ``ASTRA_MAX_REQUESTS``. The file is read line by line: memory grows with the requests kept, not the bytes."""
    from astra_sim.errors import AstraError

    name = str(path)
    try:
        with open(name, encoding="utf-8-sig", newline="") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_TRACE_BYTES:
                raise ConfigError(f"{name}: request trace of {size:,} bytes, more than the {MAX_TRACE_BYTES:,} "
                                  "accepted (ASTRA_MAX_TRACE_BYTES raises the limit)")
            requests = _read_requests(handle, name, max_context)
    except AstraError:
        raise
    except FileNotFoundError:
        raise ConfigError(f"request trace file {name!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"request trace file {name!r} is a directory") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start} of a read block)") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise ConfigError(f"{name}: cannot read the request trace: {exc}") from None
    requests.sort(key=lambda r: (r.arrival_ns, r.id))
    return requests


def _lines(handle, name):
    """``(line number, line)`` of a text file, each at most :data:`MAX_LINE_CHARS` (a huge line is refused
    before it is held whole)."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_CHARS:
            raise ConfigError(f"{name}:{number}: line longer than {MAX_LINE_CHARS:,} characters")
        yield number, line


def _records(handle, name):
    """``(columns, iterator of (line number, dict))`` of a JSONL or CSV trace, read as it is consumed."""
    from astra_sim.safeio import parse_json

    head = handle.read(4096).lstrip()
    handle.seek(0)
    if name.endswith((".jsonl", ".json")) or head.startswith("{"):
        def jsonl():
            for number, line in _lines(handle, name):
                if not line.strip():
                    continue
                record = parse_json(line, f"{name}:{number}")  # bounded nesting: no RecursionError
                if not isinstance(record, dict):
                    raise ConfigError(f"{name}:{number}: expected a JSON object, got {type(record).__name__}")
                yield number, record

        return "native", jsonl()
    reader = csv.reader(line for _, line in _lines(handle, name))
    try:
        header = next(reader)
    except StopIteration:
        raise ConfigError(f"{name}: empty trace (expected a CSV header)") from None
    except csv.Error as exc:
        raise ConfigError(f"{name}:1: {exc}") from None
    header = [h.strip() for h in header]
    if all(c in header for c in _AZURE):
        columns = "azure"
    elif all(c in header for c in _BURST):
        columns = "burst"
    elif all(c in header for c in ("prompt_tokens", "output_tokens")) and (
            "arrival_s" in header or "arrival_ns" in header):
        columns = "native"
    else:
        raise ConfigError(f"{name}:1: unknown CSV columns {brief(header)}: expected arrival_s,prompt_tokens,"
                          "output_tokens (astra serve), TIMESTAMP,ContextTokens,GeneratedTokens (Azure LLM "
                          "inference trace) or Timestamp,Request tokens,Response tokens (BurstGPT)")

    def rows():
        try:
            for row in reader:
                number = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise ConfigError(f"{name}:{number}: {len(row)} fields, the header has {len(header)}")
                yield number, dict(zip(header, row))
        except csv.Error as exc:
            raise ConfigError(f"{name}:{reader.line_num}: {exc}") from None

    return columns, rows()


def _read_requests(handle, name, max_context):
    columns, records = _records(handle, name)
    requests = []
    origin = None
    for number, record in records:
        if len(requests) >= MAX_REQUESTS:
            raise ConfigError(f"{name}:{number}: more than {MAX_REQUESTS:,} requests (about "
                              f"{MAX_REQUESTS * REQUEST_BYTES >> 20:,} MiB of memory); ASTRA_MAX_REQUESTS raises the "
                              "limit")
        try:
            request = _row_request(record, len(requests), columns)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{name}:{number}: {exc}") from None
        if columns != "native":  # absolute time stamps: count from the first row's
            origin = request.arrival_ns if origin is None else origin
            request.arrival_ns -= origin
        if request.arrival_ns < 0:
            raise ConfigError(f"{name}:{number}: negative arrival time {request.arrival_ns / NS:g} s"
                              + (" (earlier than the first row's)" if columns != "native" else ""))
        if max_context is not None and request.prompt_tokens + request.output_tokens > max_context:
            raise ConfigError(f"{name}:{number}: request of {request.prompt_tokens} prompt + "
                              f"{request.output_tokens} output tokens is longer than the model's context of "
                              f"{max_context} tokens")
        requests.append(request)
    if not requests:
        raise ConfigError(f"{name}: no requests in the trace")
    return requests


# ------------------------------------------------------------------------------------------------ generator
def parse_length(text, what):
    """A token-length distribution: ``N`` (every request N), ``uniform:LO:HI``, ``exp:MEAN`` or
    ``lognormal:MEAN:CV`` (mean and coefficient of variation; lengths rounded, at least 1)."""
    text = str(text).strip()
    parts = text.split(":")
    try:
        if len(parts) == 1:
            value = int(parts[0])
            if not 1 <= value <= 10**9:
                raise ValueError
            return ("fixed", value)
        kind, args = parts[0], [float(x) for x in parts[1:]]
    except ValueError:
        raise ConfigError(f"{what}: expected N, uniform:LO:HI, exp:MEAN or lognormal:MEAN:CV, got {text!r}") from None
    shapes = {"uniform": 2, "exp": 1, "lognormal": 2}
    if kind not in shapes or len(args) != shapes[kind] or not all(math.isfinite(a) and 0 < a <= 1e9 for a in args):
        raise ConfigError(f"{what}: expected N, uniform:LO:HI, exp:MEAN or lognormal:MEAN:CV with positive "
                          f"numbers up to 1e9, got {text!r}")
    if kind == "uniform" and args[0] > args[1]:
        raise ConfigError(f"{what}: uniform:LO:HI needs LO <= HI, got {text!r}")
    return (kind, *args)


def sample_lengths(dist, n, rng, cap=None):
    import numpy as np

    kind = dist[0]
    if kind == "fixed":
        values = np.full(n, dist[1], dtype=np.int64)
    elif kind == "uniform":
        values = rng.integers(int(math.ceil(dist[1])), int(dist[2]) + 1, size=n)
    elif kind == "exp":
        values = np.rint(rng.exponential(dist[1], size=n))
    else:
        mean, cv = dist[1], dist[2]
        sigma2 = math.log(1 + cv * cv)
        values = np.rint(rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), size=n))
    values = np.maximum(values.astype(np.int64), 1)
    if cap is not None:
        values = np.minimum(values, cap)
    return values.tolist()  # Python ints


def parse_prune(text):
    """``MIN:MAX_PROMPT:MAX_TOTAL`` (``--prune``) as three ints, or None."""
    if text is None:
        return None
    try:
        low, prompt, total = (int(x) for x in str(text).split(":"))
        if not (1 <= low <= prompt and low * 2 <= total and total <= 10**9):
            raise ValueError
    except ValueError:
        raise ConfigError(f"--prune: expected MIN:MAX_PROMPT:MAX_TOTAL with 1 <= MIN <= MAX_PROMPT and "
                          f"2 MIN <= MAX_TOTAL, e.g. 4:1024:2048, got {text!r}") from None
    return low, prompt, total


def _pruned_lengths(prompt_len, output_len, n, rng, prune):
    """(prompts, outputs): ``n`` pairs drawn again until each passes ``prune`` (min, max prompt, max total),
    the rule by which vLLM's and SGLang's benchmark_serving keep ShareGPT conversations."""
    low, max_prompt, max_total = prune
    prompts, outputs = [], []
    for _ in range(1000):
        p = sample_lengths(prompt_len, n, rng)
        o = sample_lengths(output_len, n, rng)
        for a, b in zip(p, o):
            if low <= a <= max_prompt and b >= low and a + b <= max_total and len(prompts) < n:
                prompts.append(a)
                outputs.append(b)
        if len(prompts) == n:
            return prompts, outputs
    raise ConfigError(f"--prune {low}:{max_prompt}:{max_total}: the length distributions almost never give a "
                      "request within these bounds")


def generate_requests(n, qps, prompt_len, output_len, seed=0, arrival="poisson", burstiness=1.0,
                      max_context=None, prune=None):
    """``n`` requests at ``qps`` per second: Poisson arrivals (exponential gaps) or gamma arrivals of
    coefficient of variation ``burstiness`` (shape 1/cv^2; cv 1 is Poisson); lengths from :func:`parse_length`
    distributions, each request capped so that prompt + output fit ``max_context``; with ``prune`` (min, max
    prompt, max total) a pair outside it is drawn again instead (:func:`_pruned_lengths`)."""
    import numpy as np

    if n < 1:
        raise ConfigError(f"--requests must be >= 1, got {n}")
    if n > MAX_REQUESTS:
        raise ConfigError(f"--requests {n:,} is more than the {MAX_REQUESTS:,} requests one run holds (about "
                          f"{MAX_REQUESTS * REQUEST_BYTES >> 20:,} MiB); ASTRA_MAX_REQUESTS raises the limit")
    if not (qps > 0 and math.isfinite(qps)):
        raise ConfigError(f"--qps must be a positive number, got {qps}")
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / qps, size=n)
    elif arrival == "gamma":
        if not burstiness > 0:
            raise ConfigError(f"--burstiness must be > 0, got {burstiness}")
        shape = 1.0 / (burstiness * burstiness)
        gaps = rng.gamma(shape, 1.0 / (qps * shape), size=n)
    else:
        raise ConfigError(f"--arrival must be poisson or gamma, got {arrival!r}")
    gaps[0] = 0.0  # the first request arrives at time 0
    arrivals = np.rint(np.cumsum(gaps) * NS).astype(np.int64).tolist()  # Python ints
    if prune is not None:
        prompts, outputs = _pruned_lengths(prompt_len, output_len, n, rng, prune)
        if max_context is not None:
            prompts = [min(p, max_context - 1) for p in prompts]
    else:
        prompts = sample_lengths(prompt_len, n, rng, None if max_context is None else max_context - 1)
        outputs = sample_lengths(output_len, n, rng)
    out = []
    for i in range(n):
        o = outputs[i] if max_context is None else max(1, min(outputs[i], max_context - prompts[i]))
        out.append(Request(i, arrivals[i], prompts[i], o))
    return out


def write_trace(requests, path):
    """The requests as a JSONL trace (what --trace reads), written atomically; a write that fails late keeps it in
    a recovered file (ConfigError saying where)."""
    from astra_sim.safeio import write_or_recover

    lines = []
    for r in requests:
        item = {"arrival_s": r.arrival_ns / NS, "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}
        if r.priority:
            item["priority"] = r.priority
        if r.prefix_group is not None:
            item.update(prefix_group=r.prefix_group, prefix_tokens=r.prefix_tokens)
        lines.append(json.dumps(item))
    write_or_recover(os.fspath(path), ("\n".join(lines) + "\n").encode(), "astra serve", "--save-trace")


#: one row per served request (``--requests-csv``, :func:`requests_frame`): times in integer ns, energy in integer mJ
REQUEST_COLUMNS = ("id", "replica", "arrival_ns", "prompt_tokens", "output_tokens", "scheduled_ns", "first_token_ns",
                   "finish_ns", "preemptions", "energy_mj")


def request_rows(requests):
    """``[[value per REQUEST_COLUMNS]]`` of served requests, by id (``energy_mj`` empty when the run has no power
    data)."""
    return [[("" if v is None and column == "energy_mj" else v) for column in REQUEST_COLUMNS
             for v in (getattr(r, column),)] for r in sorted(requests, key=lambda r: r.id)]


def requests_frame(requests):
    """Served requests as a pandas DataFrame (:data:`REQUEST_COLUMNS`, integer ns) with each request's TTFT, E2E and
    queueing delay: ``report, requests = astra_serving.serve(spec); requests_frame(requests)``."""
    import pandas as pd

    frame = pd.DataFrame(request_rows(requests), columns=list(REQUEST_COLUMNS))
    frame["ttft_ns"] = frame["first_token_ns"] - frame["arrival_ns"]
    frame["e2e_ns"] = frame["finish_ns"] - frame["arrival_ns"]
    frame["queueing_ns"] = frame["scheduled_ns"] - frame["arrival_ns"]
    return frame
