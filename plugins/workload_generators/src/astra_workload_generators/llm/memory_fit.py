"""What would make a step fit: the single changes of its flags that lower the memory estimate's peak, in the order
a user would try them (the cheapest in speed first), each with the peak it would give, and the verdict of a peak
against a device's memory (fits, a near miss within the model's uncertainty, or out of memory)."""

from __future__ import annotations

import dataclasses
import functools

from astra_sim.errors import ConfigError

from .config import LlmConfig, check_config, implied_framework
from .memory import UNCERTAINTY, memory_estimate, recompute_mode
from .model import ModelDims


def _candidates(cfg: LlmConfig):
    """(flags, changed config) of each single change worth trying, cheapest first."""
    if cfg.zero == 3 and not cfg.reshard_after_forward:
        yield "--reshard-after-forward", dict(reshard_after_forward=True)
    mode = recompute_mode(cfg)
    if mode == "none":
        yield "--recompute selective", dict(recompute_selective=True)
    dp = cfg.dp * cfg.cp
    if cfg.zero == 0 and dp > 1 and implied_framework(cfg) != "fsdp2":
        yield "--zero 1", dict(zero=1)
    if mode != "full":
        yield "--recompute full", dict(recompute=True, recompute_selective=False)
    b, m = cfg.micro_batch_size, cfg.micro_batches
    if b > 1 and b % 2 == 0:
        yield f"--micro-batch-size {b // 2} --micro-batches {2 * m}", dict(micro_batch_size=b // 2,
                                                                           micro_batches=2 * m)
    if cfg.dp % 2 == 0 and cfg.dp // 2 % cfg.ep == 0:
        sp = cfg.sequence_parallel or cfg.tp == 1  # (TP from 1: with sequence parallelism, as Megatron runs it)
        yield (f"--tp {2 * cfg.tp} --dp {cfg.dp // 2}" + (" --sequence-parallel" if sp and not cfg.sequence_parallel
                                                          else ""), dict(tp=2 * cfg.tp, dp=cfg.dp // 2,
                                                                         sequence_parallel=sp))
        yield f"--pp {2 * cfg.pp} --dp {cfg.dp // 2}", dict(pp=2 * cfg.pp, dp=cfg.dp // 2)


@functools.lru_cache(maxsize=16)
def fixes(dims: ModelDims, cfg: LlmConfig) -> tuple:
    """((flags, peak bytes), ...) of the single changes that give a valid step with a lower peak than ``cfg``'s,
    cheapest first (the GPU count stays: more TP or PP takes it from DP)."""
    if cfg.inference:
        return ()
    now = max(m.total for m in memory_estimate(dims, cfg))
    out = []
    for flags, change in _candidates(cfg):
        other = dataclasses.replace(cfg, **change)
        try:
            check_config(dims, other)
        except ConfigError:
            continue
        peak = max(m.total for m in memory_estimate(dims, other))
        if peak < now:
            out.append((flags, peak))
    return tuple(out)


def verdict(peak: int, capacity: int) -> str:
    """``fits`` (peak <= capacity), ``near`` (over by less than :data:`UNCERTAINTY`: a warning) or ``oom``."""
    if peak <= capacity:
        return "fits"
    return "near" if peak <= capacity * (1 + UNCERTAINTY) else "oom"


def first_fix(fix_list, capacity: int):
    """The first ``(flags, peak)`` of ``fix_list`` whose peak fits ``capacity``, or None."""
    return next(((flags, peak) for flags, peak in fix_list if peak <= capacity), None)
