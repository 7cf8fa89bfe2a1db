"""The sweep specification (YAML): what is fixed, what varies, and the points it makes.

::

    workload:              # exactly one of: trace (a prefix), llm / micro (the generator's long options)
      llm: {preset: gpt3-13b, tp: 2, pp: 2, dp: 2, micro-batches: 4}
    run: {platform: hgx-h100, compute-model: gpu}      # astra run's long options, without dashes
    axes:
      grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [1, 2, 4]}
      zip: {a.b: [...], c.d: [...]}
      random: {n: 20, seed: 1, space: {workload.llm.micro-batches: [4, 8, 16]}}

Extensions (optional top-level keys, also reachable as axes): ``gpu`` (fields of the GPU YAML, on top of the
run's ``--gpu`` or the platform's GPU: ``gpu.hbm_bandwidth_gbps``, ``gpu.tensor_tflops.bf16``), ``platform``
(``platform.nic_gbps``: NIC GB/s per GPU and direction, ``platform.gpus_per_node``), ``network`` and ``system``
(keys of the network YAML and system JSON, ``network.bandwidth.1`` for one dimension's entry). ``nodes`` is
short for ``run.nodes``; without it a platform gets as many nodes as the workload's ranks fill. ``prices``
names a price table (YAML, relative to the spec's folder) from which each row gets its cost columns
(:mod:`astra_sweep.derived`).

Serving points: ``workload: {serve: {...}}`` holds ``astra serve``'s long options (platform, tp, qps, requests,
...), each point is one ``astra serve`` run and its row has the serving columns (``ttft_p50_ns`` ...
``throughput_tokens_per_s``, see :func:`astra_sweep.point.fill_serve_row`); the axes are ``workload.serve.<option>``
(``workload.serve.qps: [1, 2, 4, 8]`` is a QPS sweep, which ``astra plot`` draws as throughput-latency curves),
and ``run``, ``gpu``, ``platform``, ``network`` and ``system`` do not apply.

Every option is checked by what reads it: ``astra run``'s parser (the kernel's ``RunSpec``), ``LlmSpec``,
``generate_micro``'s options and ``ServeSpec``, so a spec error names the axis (or key), the option and the value, before anything runs.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import random
import sys
from dataclasses import dataclass, field

from astra_sim.cliutil import did_you_mean
from astra_sim.errors import ConfigError
from astra_sim.limits import env_limit

#: Most points one sweep runs (each is a simulation and a row of the results file).
MAX_SWEEP_POINTS = env_limit("ASTRA_MAX_SWEEP_POINTS", 100_000)
WORKLOAD_KINDS = ("trace", "llm", "micro", "serve", "cluster")
TOP_KEYS = ("workload", "run", "axes", "gpu", "platform", "network", "system", "prices")
AXIS_KINDS = ("grid", "zip", "random")
#: astra run options the sweep sets itself
RESERVED_RUN = ("workload-configuration", "output", "report-json", "json", "astra-sim-log", "quiet", "max-table-ranks",
                "plugin")
#: astra run options that write files of one run's own (a sweep's rows are its output)
OWN_OUTPUT_RUN = ("timeline", "timeline-format", "timeline-ranks", "partial-report")
#: astra serve options the sweep sets itself, or that write files of their own
RESERVED_SERVE = ("output", "report-json", "json", "requests-csv", "timeline", "save-trace", "quiet")
#: astra run options naming files whose contents travel with the point (Dask workers share no paths)
FILE_RUN_OPTIONS = ("system-configuration", "network-configuration", "remote-memory-configuration",
                    "comm-group-configuration")
PLATFORM_FIELDS = {"nic_gbps": "NIC bandwidth per GPU and direction, GB/s (10^9 B/s)",
                   "gpus_per_node": "GPUs per node (scale-up domain)"}


@dataclass
class Point:
    """One configuration: the spec's base with this point's axis values applied."""

    values: dict                       # axis name -> value (the row's axis columns)
    workload_kind: str
    workload: dict                     # llm/micro options, or {"trace": prefix}
    run: dict                          # astra run options (no dashes)
    gpu: dict = field(default_factory=dict)
    platform: dict = field(default_factory=dict)
    network: dict = field(default_factory=dict)
    system: dict = field(default_factory=dict)

    def settings(self):
        return {"workload": {self.workload_kind: self.workload}, "run": self.run, "gpu": self.gpu,
                "platform": self.platform, "network": self.network, "system": self.system}

    @property
    def id(self):
        """Stable id from everything that defines the point (so a changed spec never reuses a row)."""
        text = json.dumps(self.settings(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Spec:
    path: str
    base: Point
    axes: list                         # axis names, in column order
    points: list                       # [Point]
    prices: object = None              # the price table (astra_sweep.derived.PriceTable), when the spec names one


def _where(path, key):
    return f"{path}: {key}"


def load_spec(path, parsers):
    """Read, check and expand the spec at ``path``. ``parsers``: ``{"run": astra run's parser}``
    (:func:`astra_sweep.commands.command_parsers`)."""
    from astra_sim.safeio import load_yaml

    data = load_yaml(path, "sweep spec")  # bounded, safe, no alias bombs
    return parse_spec(data, path, parsers)


def parse_spec(data, path, parsers):
    """The :class:`Spec` of the mapping ``data`` read from ``path``; a one-line ConfigError naming ``path`` and
    the key (control characters in a user's keys escaped)."""
    try:
        return _parse_spec(data, path, parsers)
    except ConfigError as exc:
        message = str(exc)
        if message.isprintable():
            raise
        raise ConfigError("".join(c if c.isprintable() else repr(c)[1:-1] for c in message)) from None


def _parse_spec(data, path, parsers):
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a sweep spec is a mapping with workload, run and axes")
    for key in data:
        if key not in TOP_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r}{did_you_mean(key, TOP_KEYS)} (known: {', '.join(TOP_KEYS)})")
    workload = data.get("workload")
    if not isinstance(workload, dict) or len(workload) != 1 or next(iter(workload)) not in WORKLOAD_KINDS:
        raise ConfigError(f"{path}: workload must have exactly one of {', '.join(WORKLOAD_KINDS)}, got "
                          f"{list(workload) if isinstance(workload, dict) else workload!r}")
    kind, options = next(iter(workload.items()))
    if kind == "trace":
        if not isinstance(options, str) or not options:
            raise ConfigError(f"{path}: workload.trace must be a trace prefix, got {options!r}")
        options = {"trace": options}
    elif not isinstance(options, dict):
        raise ConfigError(f"{path}: workload.{kind} must be a mapping of the generator's long options")
    run = data.get("run") or {}
    sections = {k: data.get(k) or {} for k in ("gpu", "platform", "network", "system")}
    for key, value in [("run", run), *sections.items()]:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {key} must be a mapping, got {value!r}")
    if kind == "serve":
        _serve_spec(_where(path, "workload.serve"))
        for key, value in [("run", run), *sections.items()]:
            if value:
                raise ConfigError(f"{path}: {key}: a serving spec (workload.serve) takes astra serve's options "
                                  f"under workload.serve (platform, tp, qps, ...); {key} does not apply")
    if kind == "cluster":
        from .cluster_points import cluster_spec, parse_options

        options = parse_options(options, path, _where(path, "workload.cluster"))
        for key, value in [("run", run), *sections.items()]:
            if value:
                raise ConfigError(f"{path}: {key}: a cluster spec (workload.cluster) names its cluster spec file and "
                                  f"the keys it sets (checkpoint.interval_steps, ...); {key} does not apply")
        cluster_spec(options, _where(path, "workload.cluster"))
    base = Point({}, kind, dict(options), dict(run), **copy.deepcopy(sections))
    for name, value in base.workload.items():
        if kind not in ("trace", "cluster"):
            _check_workload_option(base, name, value, _where(path, f"workload.{kind}.{name}"))
    if kind == "serve":  # the whole mapping (astra serve requires some options, e.g. --platform)
        _serve_spec(_where(path, "workload.serve")).from_mapping(base.workload, _where(path, "workload.serve"))
    for name, value in base.run.items():
        _check_run_option(parsers["run"], name, value, _where(path, f"run.{name}"))
    for name in base.platform:
        _check_platform_field(name, base, _where(path, f"platform.{name}"))
    axes, combos = _expand_axes(data.get("axes"), path)
    points = []
    for combo in combos:
        point = copy.deepcopy(base)
        for axis, value in combo.items():
            try:
                apply_axis(point, axis, value)
            except ConfigError as exc:  # apply_axis knows the axis, not the file
                raise ConfigError(f"{path}: axes: {exc}") from None
        point.values = dict(combo)
        points.append(point)
    for axis in axes:  # check every value of every axis against its option
        for point in points:
            _check_axis_value(parsers, point, axis, point.values[axis], path)
    seen = {}
    for point in points:
        if point.id in seen:
            raise ConfigError(f"{path}: axes: two points have the same settings ({point.values} and "
                              f"{seen[point.id].values})")
        seen[point.id] = point
    prices = None
    if "prices" in data:
        from astra_sim.platforms import platforms

        from .derived import load_prices

        prices = load_prices(data["prices"], path, platforms())
    return Spec(path, base, axes, points, prices)


def _expand_axes(axes, path):
    """(axis names, [ {axis: value} ]) : grid x zip x random. The number of points is checked against
    ``MAX_SWEEP_POINTS`` before any is made (a random block samples indices of its space, never lists it)."""
    if axes is None:
        return [], [{}]
    if not isinstance(axes, dict):
        raise ConfigError(f"{path}: axes must be a mapping with grid, zip and/or random")
    names, parsed = [], []  # (kind, {axis: values}, points, random seed or None)
    total = 1
    for kind, body in axes.items():
        where = f"{path}: axes.{kind}"
        if kind not in AXIS_KINDS:
            raise ConfigError(f"{path}: axes: unknown kind {kind!r}{did_you_mean(kind, AXIS_KINDS)} "
                              f"(known: {', '.join(AXIS_KINDS)})")
        if kind == "random":
            if not isinstance(body, dict) or set(body) - {"n", "seed", "space"} or "space" not in body:
                raise ConfigError(f"{where} must be {{n: N, seed: S, space: {{axis: [values]}}}}")
            n, seed = body.get("n"), body.get("seed", 0)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"{where}.n must be a positive integer, got {n!r}")
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ConfigError(f"{where}.seed must be an integer, got {seed!r}")
            space = _axis_lists(body["space"], f"{where}.space")
            combinations = math.prod(len(v) for v in space.values())
            if combinations > sys.maxsize:
                raise ConfigError(f"{where}.space has {combinations:.3g} combinations, more than {sys.maxsize:,} to "
                                  "sample from")
            parsed.append((kind, space, min(n, combinations), seed))
            body = space
        else:
            body = _axis_lists(body, where)
            if kind == "grid":
                size = math.prod(len(v) for v in body.values())
            else:
                lengths = {len(v) for v in body.values()}
                if len(lengths) > 1:
                    raise ConfigError(f"{where}: every axis must have as many values (got "
                                      + ", ".join(f"{k}: {len(v)}" for k, v in body.items()) + ")")
                size = lengths.pop() if lengths else 1
            parsed.append((kind, body, size, None))
        for name in body:
            if name in names:
                raise ConfigError(f"{where}: axis {name!r} appears twice")
            names.append(name)
        total *= parsed[-1][2]
        if total > MAX_SWEEP_POINTS:
            raise ConfigError(f"{path}: axes make {total:,} points or more, over the {MAX_SWEEP_POINTS:,} one sweep "
                              "runs (ASTRA_MAX_SWEEP_POINTS raises the limit)")
    combos = [{}]
    for kind, body, count, seed in parsed:
        if kind == "random":
            # the same points as sampling the listed product (sample draws indices either way), without listing it
            chosen = [_product_item(list(body.values()), i)
                      for i in random.Random(seed).sample(range(math.prod(len(v) for v in body.values())), count)]
        elif kind == "grid":
            chosen = itertools.product(*body.values())
        else:
            chosen = zip(*body.values())
        block = [dict(zip(body, values)) for values in chosen]
        combos = [{**a, **b} for a in combos for b in block]
    return names, combos


def _product_item(lists, index):
    """``list(itertools.product(*lists))[index]``, computed (the last list varies fastest)."""
    values = []
    for values_of in reversed(lists):
        index, digit = divmod(index, len(values_of))
        values.append(values_of[digit])
    return tuple(reversed(values))


def _axis_lists(body, where):
    if not isinstance(body, dict) or not body:
        raise ConfigError(f"{where} must map axis names to lists of values")
    for name, values in body.items():
        if not isinstance(name, str):
            raise ConfigError(f"{where}: axis name {name!r} must be a string such as workload.llm.tp")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: {name}: expected a non-empty list of values, got {values!r}")
    return body


def apply_axis(point, axis, value):
    """Set ``axis`` (``workload.llm.tp``, ``run.platform``, ``nodes``, ``gpu.x.y``, ``network.bandwidth.1``,
    ...) to ``value`` on ``point``."""
    head, _, rest = axis.partition(".")
    if axis == "nodes":
        point.run["nodes"] = value
    elif head == "workload":
        kind, _, option = rest.partition(".")
        if kind == "trace" and not option:
            point.workload = {"trace": value}
        elif kind != point.workload_kind or not option:
            raise ConfigError(f"axis {axis!r}: the spec's workload is {point.workload_kind}; expected "
                              f"workload.{point.workload_kind}.<option>")
        else:
            point.workload[option] = value
    elif head == "run" and rest:
        point.run[rest] = value
    elif head in ("gpu", "platform", "network", "system") and rest:
        getattr(point, head)[rest] = value
    else:
        raise ConfigError(f"axis {axis!r}: expected workload.<kind>.<option>, run.<option>, nodes, gpu.<field>, "
                          "platform.<field>, network.<key> or system.<key>")


def _serve_spec(where):
    try:
        from astra_serving import ServeSpec
    except ImportError:
        raise ConfigError(f"{where}: serving points need astra serve (pip install astra-sweep[serve], the "
                          "astra-serving plugin)") from None
    return ServeSpec


def _check_workload_option(point, name, value, where, axis=False):
    """One generator (or astra serve) option of ``point``, by the generator's own checks: name, type, choices.
    A serving axis value is checked with the point's whole mapping (astra serve requires some options); the
    base mapping is checked whole once."""
    kind = point.workload_kind
    if kind == "cluster":
        if axis:
            from .cluster_points import cluster_spec

            cluster_spec({**point.workload, name: value}, where)
        return
    if kind == "serve":
        if str(name).replace("_", "-") in RESERVED_SERVE:
            raise ConfigError(f"{where}: {name} is set by the sweep itself (each point's report is its row)")
        if axis:  # (the base mapping is checked whole, once)
            _serve_spec(where).from_mapping({**point.workload, name: value}, where)
    elif kind == "llm":
        from astra_workload_generators.llm import LlmSpec

        LlmSpec.from_mapping({name: value}, where)
    else:
        check_micro_option(name, value, where)


def _check_axis_value(parsers, point, axis, value, path):
    where = f"{path}: axis {axis}"
    head, _, rest = axis.partition(".")
    if point.workload_kind == "cluster" and head != "workload":
        raise ConfigError(f"{where}: a cluster spec varies keys of its cluster spec (workload.cluster.<key>, e.g. "
                          "workload.cluster.checkpoint.interval_steps); run, nodes, gpu, platform, network and system "
                          "do not apply")
    if point.workload_kind == "serve" and head != "workload":
        raise ConfigError(f"{where}: a serving spec varies astra serve's options (workload.serve.<option>, e.g. "
                          "workload.serve.qps); run, nodes, gpu, platform, network and system do not apply")
    if axis == "nodes" or head == "run":
        _check_run_option(parsers["run"], rest or "nodes", value, where)
    elif head == "workload" and point.workload_kind != "trace":
        option = rest.partition(".")[2]
        _check_workload_option(point, option, value, where, axis=True)
    elif head == "workload":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: value {value!r} is not a trace prefix")
    elif head == "platform":
        _check_platform_field(rest, point, where)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{where}: value {value!r} is not a positive number")
    elif head == "system":
        from astra_sim.config import KNOWN_SYSTEM_KEYS

        key = rest.split(".")[0]
        if key not in KNOWN_SYSTEM_KEYS:
            raise ConfigError(f"{where}: unknown system configuration key {key!r}"
                              f"{did_you_mean(key, KNOWN_SYSTEM_KEYS)}")
    elif head == "network":
        key = rest.split(".")[0]
        known = ("topology", "npus_count", "bandwidth", "latency", "cross_dimension_route")
        if key not in known:
            raise ConfigError(f"{where}: unknown network key {key!r}{did_you_mean(key, known)} (known: {', '.join(known)})")


def _check_platform_field(name, point, where):
    if name not in PLATFORM_FIELDS:
        raise ConfigError(f"{where}: unknown platform field {name!r}{did_you_mean(name, PLATFORM_FIELDS)} (known: "
                          + ", ".join(f"{k} ({v})" for k, v in PLATFORM_FIELDS.items()) + ")")
    if not point.run.get("platform"):
        raise ConfigError(f"{where}: platform fields need run.platform")


def _check_run_option(parser, name, value, where, pm=None):
    flag = str(name).replace("_", "-")
    if flag in RESERVED_RUN:
        raise ConfigError(f"{where}: {name} is set by the sweep itself")
    if flag in OWN_OUTPUT_RUN:
        raise ConfigError(f"{where}: {name} writes files of its own for one run; not in a sweep (a point's "
                          "report is its row)")
    check_option(parser, name, value, where)
    if flag == "platform" and value is not None:
        from astra_sim.platforms import get_platform

        try:
            get_platform(value, pm)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def check_option(parser, name, value, where, command=None):
    """``value`` for ``--name`` of ``parser``'s command: an error naming ``where`` and the option (unknown, with a
    suggestion) or the value (wrong type, not a choice), from the kernel's option helpers."""
    from astra_sim.cliutil import option_argv

    if not isinstance(name, str):
        raise ConfigError(f"{where}: option name {name!r} is not a string")
    option_argv(parser, name, _given(parser, name, value), where)


def _given(parser, name, value):
    """``false`` for an option whose value is optional (``--recompute [MODE]``) means not given."""
    from astra_sim.cliutil import option_action

    action = option_action(parser, name)
    if value is False and action is not None and action.nargs == "?" and action.type is None:
        return None
    return value


def check_micro_option(name, value, where):
    """``value`` for ``generate_micro``'s option ``name`` (``astra workload micro``'s flag names): the name and
    the value's kind; the generator checks the combination when the base case is made."""
    from astra_workload_generators import micro

    dest = str(name).replace("-", "_")
    if dest not in micro.MICRO_OPTIONS:
        known = [k.replace("_", "-") for k in micro.MICRO_OPTIONS]
        raise ConfigError(f"{where}: unknown astra workload micro option {name!r}{did_you_mean(name, known)}")
    default = micro.MICRO_OPTIONS[dest]
    choices = {"collective": tuple(micro.COLLECTIVES), "p2p": micro.P2P_PATTERNS, "style": micro.STYLES,
               "ids": ("per-file", "global")}.get(dest)
    if isinstance(default, bool) or dest == "dependent":
        ok = isinstance(value, bool)
    elif dest == "npus" or isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= (1 if dest == "npus" else 0)
    elif dest in ("compute",):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    elif dest == "graph":
        ok = isinstance(value, (str, dict))
    else:
        ok = isinstance(value, (str, int)) and not isinstance(value, bool) and (choices is None or value in choices)
    if not ok:
        expected = (f"one of {', '.join(choices)}" if choices else "true or false" if isinstance(default, bool)
                    else "a positive integer" if dest == "npus" else "an integer" if isinstance(default, int)
                    else "a number" if dest == "compute" else "a size such as 64MiB" if "size" in dest or "mem" in dest
                    else "a value")
        raise ConfigError(f"{where}: value {value!r} is not {expected}")


def to_argv(parser, options):
    """A workload generator's options as its command-line words (checked as :func:`check_option` does)."""
    from astra_sim.cliutil import option_argv

    out = []
    for name, value in options.items():
        out += option_argv(parser, name, _given(parser, name, value), name)
    return out


def read_file_options(point):
    """Replace the run's configuration file paths by their contents (``{"file": name, "text": ...}``), so that
    a point carries what it needs to any worker."""
    for name in FILE_RUN_OPTIONS:
        value = point.run.get(name)
        if isinstance(value, str):
            try:
                with open(value, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                raise ConfigError(f"run.{name}: cannot read {value}: {exc.strerror or exc}") from None
            point.run[name] = {"file": os.path.basename(value), "text": text}
    gpu = point.run.get("gpu")
    if isinstance(gpu, str) and os.path.isfile(gpu):
        with open(gpu, encoding="utf-8") as handle:
            point.run["gpu"] = {"file": os.path.basename(gpu), "text": handle.read()}
