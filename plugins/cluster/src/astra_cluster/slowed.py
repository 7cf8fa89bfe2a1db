"""The ``slowed`` compute model: another compute model's times, each rank's scaled by its own factor.

A straggler (a GPU that runs hot, throttles or is simply a slow part) takes longer for the same kernel. The
cluster plugin asks for it through two run options (not ``astra run`` flags: they are set from Python):

* ``slowed_inner``: the compute model that times the nodes (``gpu``, ``replay``, ``roofline``, ...);
* ``slowed_factors``: ``{rank: factor}`` (factor >= 0; 1.0 is nominal, 1.3 is 30 % slower); missing ranks are 1.0;
* ``slowed_jitter_sigma`` and ``slowed_jitter_seed``: per-op jitter: every compute op's time is also scaled by its
  own lognormal factor ``exp(sigma x z)`` (median 1), ``z`` drawn from (seed, rank, node id), so the same op gets
  the same factor however often it is timed. A synchronous step waits at each collective for the slowest of its
  ranks: the max-of-N effect.

Communication is not scaled: a slow GPU's NVLink and NIC run at their rates. A run with factors that differ
between ranks does not fold (a rank's time then depends on its number)."""

from __future__ import annotations

import math
import random

from astra_sim.errors import ConfigError

SLOWED = "slowed"


def make_slowed(context):
    """The factory registered as ``slowed``."""
    from astra_sim.plugins import registry_of

    options = context.options
    inner_name = options.get("slowed_inner")
    if not inner_name or inner_name == SLOWED:
        raise ConfigError("--compute-model slowed needs the option slowed_inner (the compute model it slows: gpu, "
                          f"replay, ...); got {inner_name!r} (it is set by astra cluster, not on the command line)")
    factors = check_factors(options.get("slowed_factors"), "option slowed_factors")
    sigma, seed = options.get("slowed_jitter_sigma", 0.0), options.get("slowed_jitter_seed", 0)
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 <= sigma < 10:
        raise ConfigError(f"option slowed_jitter_sigma must be a number in [0, 10), got {sigma!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"option slowed_jitter_seed must be an integer, got {seed!r}")
    inner = registry_of(None).get("compute_model", inner_name).factory(context)
    return SlowedComputeModel(inner, factors, float(sigma), seed)


def op_factor(sigma, seed, rank, node_id) -> float:
    """One op's jitter ``exp(sigma x z)``: ``z`` a standard normal drawn from (seed, rank, node id)."""
    return math.exp(sigma * random.Random(f"jitter-{seed}-{rank}-{node_id}").gauss(0.0, 1.0))


def check_factors(factors, where) -> dict:
    """``{rank: factor}`` with int ranks >= 0 and finite factors > 0, or a ConfigError naming ``where``."""
    if factors is None:
        return {}
    if not isinstance(factors, dict):
        raise ConfigError(f"{where} must be a mapping {{rank: factor}}, got {type(factors).__name__}")
    out = {}
    for rank, factor in factors.items():
        try:
            r = int(rank)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: rank {rank!r} is not an integer") from None
        if r < 0 or isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < 1e6:
            raise ConfigError(f"{where}: rank {rank!r} must map to a factor > 0 (1.0 = nominal), got {factor!r}")
        out[r] = float(factor)
    return out


class SlowedComputeModel:
    """``inner.compute_time_ns(node, rank) x factors[rank]`` (x the op's jitter with ``jitter_sigma``), rounded to
    the ns; every other attribute is the inner model's (its breakdown, op classes and timeline details stay)."""

    def __init__(self, inner, factors, jitter_sigma=0.0, jitter_seed=0):
        self.inner = inner
        self.factors = factors
        self.jitter_sigma = jitter_sigma
        self.jitter_seed = jitter_seed

    @property
    def foldable(self):
        return bool(getattr(self.inner, "foldable", False)) and not self.factors and not self.jitter_sigma

    def compute_time_ns(self, node, rank):
        ns = self.inner.compute_time_ns(node, rank)
        factor = self.factors.get(rank, 1.0)
        if self.jitter_sigma and ns:
            factor *= op_factor(self.jitter_sigma, self.jitter_seed, rank, node.id)
        if ns is None or factor == 1.0:
            return ns
        return max(1, int(round(ns * factor)))

    def __getattr__(self, name):
        return getattr(self.inner, name)
