"""Iteration times from the step simulator, memoised by a bucketed batch shape.

An engine iteration is a batch of ``prefill`` prompt tokens (new prompts and chunks of long ones) and
``decode`` sequences generating one token each against a KV cache of mean length ``context``. Its time is
what ``astra workload llm --mode prefill|decode|mixed ... --logits last`` followed by ``astra run --platform P``
gives for that shape, through the calls behind those commands (:func:`generate_llm_workload` of an
:class:`LlmSpec`, :func:`astra_sim.runner.run_spec` of a :class:`RunSpec`) in this process: nothing is a latency
table, and a step has the commands' defaults (the serve setting of ``inference_elementwise`` is always given).

Bucketing (why: a run visits tens of thousands of distinct shapes; each simulation costs ~0.15 s). The
prefill tokens and the decode sequences each have a grid of every integer up to ``EXACT_BELOW``, then a
geometric series of ratio ``ratio`` (default 2**(1/2), two points per doubling); the decode context a grid of
powers of two. A shape's time is interpolated linearly (trilinear) between the simulated corners of its grid
cell: step time is close to linear in each of the three between neighbouring points (GEMMs in tokens, the
weights' read shared by the batch, attention in the context). Every corner is simulated once per process, and
kept across runs and processes by the persistent step cache (stepcache.py; ``--no-cache``, ``ASTRA_CACHE=0``).
A mixed step's ``prefill_done`` (the part of the chunk's prompt computed by earlier chunks) is left out of
bucketed shapes (its attention is a few % of a step at a few thousand tokens); exact shapes keep it.
``tests/test_serve.py::test_bucketing_error_is_small`` measures the error against exact shapes.
``exact=True`` turns bucketing off.

How a shape maps onto the generator's options (whose inference steps batch sequences of one length):

* decode only: ``--mode decode --batch-size B --prompt-len C-1 --decode-len 1`` (every sequence at the mean
  context C; attention is linear in the context, so the mean gives the batch's total);
* prefill only: ``--mode prefill --batch-size 1 --prompt-len P`` (the prompts of the iteration as one
  sequence: the attention of several short prompts is overcounted, at most a few % of a step for prompts of
  a few thousand tokens; a later chunk's attention to its earlier chunks is not counted);
* both: ``--mode mixed --batch-size B --prompt-len C-1 --prefill-chunk P --prefill-done D``.

The replica's GPUs fill whole nodes of the platform: TP x PP x EP GPUs on fewer GPUs than a node run as
``--dp`` copies side by side (inference has no DP collective, so the copies do not interact).

A step run as a CUDA graph (``graph``) has no per-kernel host launch (``--host-launch-us 0``), but the GPU still
idles between two of the graph's kernels: the run's ``--gpu-kernel-gap-ns`` is
:data:`~astra_gpu_model.model.GRAPH_KERNEL_GAP_NS` (measured), so ``astra run`` with the same two flags gives the
same step.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field

from astra_sim.errors import AstraError, ConfigError

EXACT_BELOW = 4
DEFAULT_RATIO = 2 ** 0.5
CONTEXT_RATIO = 2.0
#: simulated step times of this process, by (layout, shape): a QPS sweep or a test suite simulates a shape once
_SHARED_MEMO = {}
#: the same steps' energy (a :class:`~astra_serving.stepcache.StepEnergy` or None), beside their times
_SHARED_ENERGY = {}
_UNSEEN = object()


def bucket(value, ratio=DEFAULT_RATIO, exact_below=EXACT_BELOW):
    """``value`` (int >= 0) rounded to the nearest grid point (in log space above ``exact_below``)."""
    if value <= exact_below or ratio <= 1.0:
        return int(value)
    k = math.log(value / exact_below) / math.log(ratio)
    lo = int(round(exact_below * ratio ** math.floor(k)))
    hi = int(round(exact_below * ratio ** math.ceil(k)))
    return lo if value * value <= lo * hi else hi  # the nearer in log space


def neighbours(value, ratio=DEFAULT_RATIO, exact_below=EXACT_BELOW):
    """(lo, hi, w): the grid points around ``value`` and its weight on ``hi`` (value = lo (1 - w) + hi w)."""
    if value <= exact_below or ratio <= 1.0:
        return int(value), int(value), 0.0
    k = math.log(value / exact_below) / math.log(ratio)
    lo = int(round(exact_below * ratio ** math.floor(k)))
    hi = int(round(exact_below * ratio ** math.ceil(k)))
    lo, hi = min(lo, value), max(hi, value)
    return lo, hi, (value - lo) / (hi - lo) if hi > lo else 0.0


def _pm():
    """The plugin manager of every step: every installed plugin, made once per process."""
    from astra_sim.plugins import default_plugin_manager

    return default_plugin_manager()


def _quiet(message):
    """Warnings of the steps' runs are dropped (one per simulated shape would bury the report)."""


@dataclass
class Layout:
    """One replica: a model (``model``: ``astra workload llm`` options naming it and its precision, e.g.
    ``{"model": "llama3-8b", "dtype": "bf16", "inference_elementwise": True}``) with TP x PP x EP on a platform;
    ``run``: ``astra run`` options of every step."""

    model: dict
    platform: str
    tp: int = 1
    pp: int = 1
    ep: int = 1
    run: dict = field(default_factory=dict)
    gpus_per_node: int = 8

    @property
    def gpus(self):
        return self.tp * self.pp * self.ep

    @property
    def nodes(self):
        return -(-self.gpus // self.gpus_per_node)

    @property
    def dp(self):
        """DP copies that fill the nodes (the replica's EP ranks among them)."""
        total = self.nodes * self.gpus_per_node
        if total % (self.tp * self.pp) or (total // (self.tp * self.pp)) % self.ep:
            raise ConfigError(f"TP {self.tp} x PP {self.pp} x EP {self.ep} does not tile {self.nodes} node(s) of "
                              f"{self.gpus_per_node} GPUs of {self.platform}")
        return total // (self.tp * self.pp)

    def key(self):
        """The layout as text: the memo's key (equal layouts share their simulated steps)."""
        return json.dumps([self.model, self.platform, self.tp, self.pp, self.ep, self.run, self.gpus_per_node],
                          sort_keys=True, default=repr)

    def llm_spec(self, **shape):
        """The :class:`~astra_workload_generators.llm.spec.LlmSpec` of one step of this layout: the model on
        the replica's TP/PP/DP/EP, the last token's logits, and ``shape`` (mode, batch size, lengths); generated for
        the layout's platform and the GPU its run options compute on (``LlmSpec.for_platform``: a ``gpu`` option
        replaces the platform's), as every door generates a step for the machine that runs it."""
        base = self.__dict__.get("_llm")
        if base is None:
            from astra_workload_generators.llm.spec import LlmSpec

            base = self.__dict__["_llm"] = LlmSpec.from_mapping(
                {**self.model, "tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "logits": "last"},
                where="astra serve: the model").for_platform(self.platform, self.run)
        return base.replace(**shape) if shape else base

    def run_spec(self, workload, graph=False):
        """The :class:`~astra_sim.spec.RunSpec` of one step's workload on the replica's nodes: ``--allow-oom``
        (the engine's paged cache is the memory model here, capacity.py: a grid corner above the batch actually
        run may hold more KV than fits, and its time is still what the interpolation needs), ``--no-gpu-utilization``
        (a report section :meth:`StepTimer.simulate` does not read, 6 % of a 70B TP 8 step's run), the layout's
        ``run`` options, and with ``graph`` no per-kernel host launch (``--host-launch-us 0``) and the GPU's idle time
        between two of the graph's kernels (``--gpu-kernel-gap-ns``, :data:`~astra_gpu_model.model.GRAPH_KERNEL_GAP_NS`)."""
        base = self.__dict__.get("_run")
        if base is None:
            from astra_sim.spec import RunSpec

            base = self.__dict__["_run"] = RunSpec.from_mapping(
                {"workload": "step", "platform": self.platform, "nodes": self.nodes, "allow_oom": True,
                 "no_gpu_utilization": True, **self.run},
                _pm(), where="astra serve: run")
        spec = base.replace(workload=workload)
        if not graph:
            return spec
        from astra_gpu_model.model import GRAPH_KERNEL_GAP_NS

        return spec.replace(host_launch_us=0.0, gpu_kernel_gap_ns=GRAPH_KERNEL_GAP_NS)

    def resolved(self, spec, pm):
        """``spec.resolve(pm)`` (the platform's generated files, the options and defaults it implies), made once per
        spec but its workload and the workload's rank count, what a resolution reads (about 10 ms of each new
        shape's run, issue 37); each step gets its own copy of the options and defaults."""
        from astra_sim.spec import workload_ranks

        key = ([(f.name, getattr(spec, f.name)) for f in dataclasses.fields(spec) if f.name != "workload"],
               workload_ranks(spec.workload, pm, spec.workload_format))
        known = self.__dict__.setdefault("_resolved", [])  # [(key, resolved)]: a spec's options are not hashable
        found = next((resolved for k, resolved in known if k == key), None)
        if found is None:
            found = spec.resolve(pm)
            known.append((key, found))
        return dataclasses.replace(found, spec=spec, configs=dict(found.configs), generated=dict(found.generated),
                                   options=copy.deepcopy(found.options),
                                   platform_defaults=copy.deepcopy(found.platform_defaults))


def stage_times(report, pp):
    """(stage 0 time, ..., stage PP-1 time) of a simulated iteration, summing to its step time: every rank of
    stage s finishes after every rank of stage s - 1 (it waits for their activations), so the ranks sorted by
    finish time fall into PP equal groups, and stage s's time is its group's last finish minus the previous
    group's. With one stage: (step time,)."""
    if isinstance(report, dict):
        step = int(report["summary"]["max_finish_ns"])
        finishes = sorted(int(r["finish_ns"]) for r in report.get("ranks") or [])
    else:  # an astra_sim.report.Report
        step = int(report.max_finish_ns)
        finishes = sorted(int(r.finish_ns) for r in report.ranks if r.finish_ns is not None)
    if pp <= 1 or not finishes or len(finishes) % pp:
        return (step,) if pp <= 1 else _equal_split(step, pp)
    per = len(finishes) // pp
    ends = [finishes[(s + 1) * per - 1] for s in range(pp)]
    if ends[-1] != step:
        return _equal_split(step, pp)
    return tuple(end - (ends[s - 1] if s else 0) for s, end in enumerate(ends))


def _equal_split(step, pp):
    base = step // pp
    return tuple([base] * (pp - 1) + [step - base * (pp - 1)])


def shape_options(prefill, decode, context, prefill_done=0):
    """``astra workload llm`` options of one iteration shape (see the module doc)."""
    if prefill <= 0 and decode <= 0:
        raise ValueError("an empty iteration has no shape")
    if decode <= 0:
        return {"mode": "prefill", "batch_size": 1, "prompt_len": prefill}
    base = {"batch_size": decode, "prompt_len": max(1, context - 1), "decode_len": 1}
    if prefill <= 0:
        return {"mode": "decode", **base}
    return {"mode": "mixed", **base, "prefill_chunk": prefill, "prefill_done": prefill_done}


class StepTimer:
    """Iteration times (int ns) of one replica layout, simulated once per bucketed shape."""

    def __init__(self, layout: Layout, ratio=DEFAULT_RATIO, exact=False, workdir=None, cache=True):
        """``cache``: True reads and writes the persistent step cache in its default folder
        (:func:`~astra_serving.stepcache.cache_folder`, None when ``ASTRA_CACHE=0``), a folder that one, False
        none."""
        from .stepcache import StepCache, cache_folder

        self.layout = layout
        self.ratio = ratio
        self.exact = exact
        self.memo = _SHARED_MEMO.setdefault(layout.key(), {})
        self.energy_memo = _SHARED_ENERGY.setdefault(layout.key(), {})
        folder = cache_folder() if cache is True else (cache or None)
        self.cache = StepCache(folder, layout.key(), layout.run, layout.pp) if folder else None
        self.from_cache = 0
        self._stages = {}  # the stage times of each shape looked up: a run repeats shapes many times
        self._totals = {}  # the step time of each shape looked up
        self._grid = {}    # (value, ratio) -> its grid points and weights: most shapes are new, their terms are not
        self._cells = {}   # a grid cell (its prefill, decode and context points, graph) -> its corners' times and keys
        self._energies = {}  # the IT energy (float mJ, the replica's GPUs) of each shape looked up
        self._last_rows = None  # (shape, its corners) of the last shape interpolated: its energy reuses them
        self.simulated = 0
        self.sim_wall_s = 0.0
        self.lookups = 0
        self._workdir = workdir

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        """The time of one iteration of this shape: exact, or interpolated linearly in the prefill tokens and
        the decode sequences between the corners of its grid cell (context and prefill_done rounded to theirs);
        each corner is simulated once. ``graph``: the step runs as one CUDA graph, which the host launches at
        once, so ``astra run`` has no per-kernel host launch (``--host-launch-us 0``) and the GPU idles
        ``--gpu-kernel-gap-ns`` between two of its kernels; else eager, each kernel launched by the host at the
        platform's measured rate."""
        shape = (prefill, decode, context, prefill_done, graph)
        total = self._totals.get(shape)
        if total is None:
            total = self._totals[shape] = sum(self.stage_ns(*shape))
        else:
            self.lookups += 1
        return total

    def stage_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        """The iteration's time on each pipeline stage, in order (one entry without PP): each corner's stage
        times interpolated with the corners' weights, rounded so that they sum to the interpolated step time
        (the rounding goes to the last stage; :meth:`step_ns` is their sum). A stage's time runs from the end
        of the previous stage's to the end of its own in the simulated iteration: its compute and collectives
        and the activations' send to it."""
        self.lookups += 1
        shape = (prefill, decode, context, prefill_done, graph)
        out = self._stages.get(shape)
        if out is None:
            out = self._stages[shape] = self._interpolate(prefill, decode, context, prefill_done, graph)
        return list(out)

    def _interpolate(self, prefill, decode, context, prefill_done, graph):
        rows = self._weighted_rows(prefill, decode, context, prefill_done, graph)
        self._last_rows = ((prefill, decode, context, prefill_done, graph), rows)  # energy_mj's, for this shape
        if self.layout.pp == 1:  # the sums below, with one stage: its time is the step's
            total = 0.0
            for weight, times, _ in rows:
                total += weight * times[0]
            return (int(round(total)),)
        parts = [0.0] * self.layout.pp
        total = 0.0
        for weight, times, _ in rows:
            total += weight * sum(times)
            for i, t in enumerate(times):
                parts[i] += weight * t
        out = [int(round(x)) for x in parts]
        out[-1] += int(round(total)) - sum(out)
        return tuple(out)

    def _weighted(self, prefill, decode, context, prefill_done, graph, keys=False):
        """[(weight, stage times)] of the grid corners a shape is interpolated from (one, weight 1, when exact),
        prefill outermost, then decode, then context. The corners of a grid cell are memoised (most shapes are
        new, but fall in a grid cell met before); the weights are the shape's. ``keys``: [(weight, corner key)]."""
        rows = self._weighted_rows(prefill, decode, context, prefill_done, graph)
        return [(w, key) for w, _, key in rows] if keys else [(w, times) for w, times, _ in rows]

    def _weighted_rows(self, prefill, decode, context, prefill_done, graph):
        """[(weight, stage times, corner key)]: :meth:`_weighted`'s corners with both."""
        ep = self.layout.ep
        if ep > 1:  # attention DP over the EP ranks: each takes its share of the batch
            prefill, decode = -(-prefill // ep), -(-decode // ep)
        if self.exact:
            key = (prefill, decode, context if decode else 0, prefill_done if prefill and decode else 0, graph)
            return [(1.0, self._corner(key), key)]
        contexts = self._points(max(2, context), CONTEXT_RATIO) if decode else ((0, 1.0),)
        prefills, decodes = self._points(prefill, self.ratio), self._points(decode, self.ratio)
        # the points kept (one or two each) name the cell: shapes of one cell share its corners
        cell = (prefills[0][0], prefills[-1][0], decodes[0][0], decodes[-1][0], contexts[0][0], contexts[-1][0], graph)
        corners = self._cells.get(cell)
        if corners is None:  # [(stage times, key)] in the rows' order
            corners = self._cells[cell] = [(self._corner(key), key) for p, _ in prefills for d, _ in decodes
                                           for c, _ in contexts for key in ((p, d, c if d else 0, 0, graph),)]
        weights = [a * b * c for _, a in prefills for _, b in decodes for _, c in contexts]  # (a * b) * c
        return [(w, times, key) for w, (times, key) in zip(weights, corners)]

    def _points(self, value, ratio):
        """((grid point, weight), ...) of ``value`` (:func:`neighbours`), those of weight 0 left out, memoised."""
        out = self._grid.get((value, ratio))
        if out is None:
            lo, hi, w = neighbours(value, ratio)
            out = self._grid[value, ratio] = tuple((x, weight) for x, weight in ((lo, 1.0 - w), (hi, w)) if weight > 0)
        return out

    def energy_mj(self, prefill, decode, context, prefill_done=0, graph=False):
        """The IT energy (float mJ) of one iteration of this shape on the replica's GPUs, interpolated with the
        weights of :meth:`stage_ns`'s time (the simulated nodes' energy times the replica's share of their GPUs:
        the copies that fill a node are not the replica's); None when the steps have no ``stats.energy``."""
        shape = (prefill, decode, context, prefill_done, graph)
        total = self._energies.get(shape, _UNSEEN)
        if total is not _UNSEEN:
            return total
        last = self._last_rows
        rows = last[1] if last is not None and last[0] == shape else self._weighted_rows(*shape)
        total, memo, gpus = 0.0, self.energy_memo, self.layout.gpus
        for weight, _, key in rows:
            if key not in memo:
                self._fill(key)
            energy = memo[key]
            if energy is None:
                total = None
                break
            total += weight * energy.it_energy_mj * gpus / energy.gpus
        self._energies[shape] = total
        return total

    def idle_mw(self):
        """The replica's IT power when it runs nothing (int mW: its GPUs' idle power and the rest of the system
        beside them), from any simulated step's energy; None when the steps have no ``stats.energy``."""
        for energy in self.energy_memo.values():
            if energy is not None:
                return energy.idle_it_mw * self.layout.gpus // energy.gpus
        return None

    def _corner(self, key):
        """A corner's stage times: memoised, else from the persistent cache, else simulated (its energy kept
        beside them in ``energy_memo``)."""
        value = self.memo.get(key)
        if value is None:
            value = self._fill(key)
        return value

    def _fill(self, key):
        entry = self.cache.get(key) if self.cache else None
        if entry is not None:
            self.from_cache += 1
            value, energy = entry
        else:
            value, energy = self.simulate(*key, with_energy=True)
            if self.cache:
                self.cache.put(key, value, energy)
        self.memo[key] = value
        self.energy_memo[key] = energy
        return value

    def simulate(self, prefill, decode, context, prefill_done=0, graph=False, with_energy=False):
        """Generate and simulate one step of exactly this shape (as a CUDA graph: ``graph``, see :meth:`Layout.run_spec`); its time on each pipeline stage in ns (a tuple summing to
        the step's time, see :func:`stage_times`), and with
        ``with_energy`` its :class:`~astra_serving.stepcache.StepEnergy` (or None) beside it."""
        from .stepcache import StepEnergy

        from astra_sim.generated import private_folder
        from astra_sim.runner import run_spec
        from astra_workload_generators.llm.spec import generate_llm_workload

        started = time.perf_counter()
        spec = self.layout.llm_spec(**shape_options(prefill, decode, context, prefill_done))
        with (private_folder("astra-serve-") if self._workdir is None  # a SIGKILLed run's is reclaimed
              else tempfile.TemporaryDirectory(prefix="astra-serve-", dir=self._workdir)) as folder:
            prefix = os.path.join(folder, "step")
            try:
                # held in memory for the run just below (issue 37: no encode and parse back; the same ns)
                generate_llm_workload(spec, prefix, on_warning=_quiet, in_memory=True)
                run, pm = self.layout.run_spec(prefix, graph), _pm()
                report = run_spec(run, pm, on_warning=_quiet, resolved=self.layout.resolved(run, pm))
            except AstraError as exc:
                raise type(exc)(f"astra serve: the step of {prefill} prefill tokens and {decode} decode sequences "
                                f"(context {context}): {exc}") from None
            value = stage_times(report, self.layout.pp)
            energy = StepEnergy.of_stats(report.stats)
        self.simulated += 1
        self.sim_wall_s += time.perf_counter() - started
        return (value, energy) if with_energy else value

    def stats(self):
        return {"shapes_simulated": self.simulated, "shapes_from_cache": self.from_cache, "lookups": self.lookups,
                "simulation_wall_s": round(self.sim_wall_s, 3),
                "bucket_ratio": None if self.exact else self.ratio, "exact_shapes": self.exact}
