"""Mixture-of-experts routing: how many token copies each expert and EP rank gets (balanced routing,
capacity factors, a straggler's imbalance, or per-expert loads)."""

from __future__ import annotations

import math

from functools import lru_cache

from typing import TYPE_CHECKING

from astra_sim.errors import ConfigError

from .model import ModelDims

if TYPE_CHECKING:
    from .config import LlmConfig


def expert_capacity(dims: ModelDims, cfg: "LlmConfig", tokens: int):
    """Token copies one expert takes from a rank holding ``tokens`` tokens: ``ceil(tokens * top_k / E * C)``
    (Megatron's ``get_capacity``), or None without a capacity factor (dropless)."""
    if cfg.moe_capacity_factor is None:
        return None
    return math.ceil(tokens * dims.top_k / dims.experts * cfg.moe_capacity_factor)


def routed_rows(dims: ModelDims, cfg: "LlmConfig", tokens: int) -> int:
    """Token copies a rank sends to the experts (and, routing being balanced and symmetric, the rows its local
    experts compute): ``tokens * top_k`` dropless; ``min(tokens * top_k, E * capacity)`` with a capacity factor
    (balanced routing overflows only when C < 1); ``E * capacity`` with padding; dropless with
    ``moe_imbalance`` F: ``ceil(tokens * top_k * F)``, the busiest EP rank's load."""
    copies = tokens * dims.top_k
    capacity = expert_capacity(dims, cfg, tokens)
    if capacity is None:  # dropless; with --moe-imbalance the busiest rank's load (every rank waits for it)
        return copies if cfg.moe_imbalance == 1 else math.ceil(copies * cfg.moe_imbalance)
    if cfg.moe_pad_to_capacity:
        return dims.experts * capacity
    return min(copies, dims.experts * capacity)


def parse_expert_load(spec, experts, moe_layers):
    """``--moe-expert-load``: the E experts' relative token loads, as a tuple of per-MoE-layer tuples (one tuple
    when every MoE layer has the same loads). ``spec``:

    - ``w0,w1,...`` (E non-negative numbers, any scale): every MoE layer;
    - ``zipf:S`` (S >= 0): expert e's load is ``(e + 1) ** -S``, every layer; experts sit on the EP ranks in
      order (rank j holds experts j*E/EP..), so EP rank 0 is the busiest, the worst placement;
    - ``zipf:S:SEED``: the same loads, dealt to the experts in a random order per MoE layer (Python's
      ``random.Random(SEED + layer)``), so the hot experts differ from layer to layer;
    - ``FILE.json``: a list of E numbers (every layer), or a list of one such list per MoE layer (in layer order),
      e.g. token counts per expert logged from a real router."""
    import random

    where = f"--moe-expert-load {spec!r}"
    if spec.endswith(".json"):
        from astra_sim.safeio import load_json

        data = load_json(spec, "--moe-expert-load")
        where = spec
        rows = data if isinstance(data, list) and data and all(isinstance(r, list) for r in data) else [data]
        if len(rows) not in (1, moe_layers):
            raise ConfigError(f"{spec}: {len(rows)} lists of expert loads, expected 1 (every MoE layer) or one per "
                              f"MoE layer ({moe_layers})")
    elif spec.startswith("zipf:"):
        parts = spec.split(":")[1:]
        try:
            skew = float(parts[0])
            seed = int(parts[1]) if len(parts) == 2 else None
        except (ValueError, IndexError):
            raise ConfigError(f"{where}: expected zipf:S or zipf:S:SEED (S a number >= 0, SEED an integer)") \
                from None
        if len(parts) > 2 or not skew >= 0 or math.isinf(skew):
            raise ConfigError(f"{where}: expected zipf:S or zipf:S:SEED (S a number >= 0, SEED an integer)")
        base = [(e + 1) ** -skew for e in range(experts)]
        if seed is None:
            rows = [base]
        else:
            rows = []
            for layer in range(moe_layers):
                dealt = list(base)
                random.Random(seed + layer).shuffle(dealt)
                rows.append(dealt)
    else:
        try:
            rows = [[float(x) for x in spec.split(",")]]
        except ValueError:
            raise ConfigError(f"{where}: expected E comma-separated numbers, zipf:S[:SEED] or a .json file") \
                from None
    out = []
    for i, row in enumerate(rows):
        what = where if len(rows) == 1 else f"{where}: MoE layer {i}"
        if not isinstance(row, list) or len(row) != experts:
            raise ConfigError(f"{what}: expected the loads of the {experts} experts, got "
                              f"{len(row) if isinstance(row, list) else type(row).__name__}")
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf for w in row) \
                or not sum(row) > 0:
            raise ConfigError(f"{what}: expert loads must be finite numbers >= 0, not all 0")
        out.append(tuple(float(w) for w in row))
    return tuple(out)


def _water_fill(weights, copies, limit):
    """``copies`` split over the experts in proportion to ``weights``, none above ``limit``: a token picks
    ``top_k`` *distinct* experts, so one expert gets at most one copy of each token. An expert whose share would
    pass the limit gets the limit, and the rest is split again over the others; what the weighted experts cannot
    take goes evenly to the experts of weight 0 (every token still needs its top_k experts)."""
    alloc = [0.0] * len(weights)
    active = [e for e, x in enumerate(weights) if x > 0]
    share = {e: weights[e] for e in active}
    left = copies
    while left > 1e-9 and active:
        total = sum(share[e] for e in active)
        full = [e for e in active if left * share[e] / total > limit]
        if not full:
            for e in active:
                alloc[e] = left * share[e] / total
            break
        for e in full:
            alloc[e] = limit
            left -= limit
        active = [e for e in active if e not in full]
        if not active:  # the weighted experts are full: the unweighted ones take the rest, evenly
            active = [e for e, x in enumerate(weights) if x <= 0]
            share = {e: 1.0 for e in active}
    return alloc


def expert_copies(dims: ModelDims, cfg: "LlmConfig", tokens: int, moe_index: int):
    """``--moe-expert-load``: the token copies one rank sends to each of the E experts in MoE layer
    ``moe_index`` (a tuple of E ints). Every rank routes its ``tokens * top_k`` copies by the same loads, no
    expert taking more than ``tokens`` (:func:`_water_fill`), rounded to whole copies by largest remainder (so
    they add up); a capacity factor caps each expert at its capacity (the hot experts drop), padding fills
    every expert to it."""
    table = cfg.moe_expert_load
    w = table[moe_index] if len(table) > 1 else table[0]
    copies = tokens * dims.top_k
    exact = _water_fill(w, copies, tokens)
    per_expert = [math.floor(x) for x in exact]
    short = copies - sum(per_expert)
    for e in sorted(range(len(w)), key=lambda e: (per_expert[e] - exact[e], e))[:short]:
        per_expert[e] += 1
    capacity = expert_capacity(dims, cfg, tokens)
    if capacity is not None:
        per_expert = [capacity if cfg.moe_pad_to_capacity else min(c, capacity) for c in per_expert]
    return tuple(per_expert)


def ep_loads(dims: ModelDims, cfg: "LlmConfig", tokens: int, moe_index: int):
    """``--moe-expert-load``: the token copies one rank sends to each EP rank's experts in MoE layer
    ``moe_index`` (a tuple of EP ints): :func:`expert_copies` summed over each EP rank's experts (rank j holds
    experts ``j*E/EP ..``). EP rank j's experts then compute ``EP * loads[j]`` rows."""
    per_expert = expert_copies(dims, cfg, tokens, moe_index)
    per_rank = dims.experts // cfg.ep
    return tuple(sum(per_expert[j * per_rank:(j + 1) * per_rank]) for j in range(cfg.ep))


def split_evenly(total: int, parts: int):
    """``total`` rows dealt to ``parts`` experts as evenly as whole rows allow (the first ``total % parts``
    get one more): balanced routing's tokens per local expert, so that a decode step's few token copies
    land on that many experts and leave the others idle, as a real router does."""
    base, extra = divmod(total, parts)
    return tuple(base + 1 if i < extra else base for i in range(parts))


def _binomial_quantiles(trials: int, p: float, probs):
    """The smallest k with P(X <= k) >= q for each q of ``probs`` (ascending), X ~ Binomial(trials, p): the
    probability mass summed from lgamma terms over mean +- 12 standard deviations (wider than any double can
    tell apart from 1), so no term underflows to a wrong CDF."""
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    lo, hi = max(0, math.floor(mean - 12 * sd) - 1), min(trials, math.ceil(mean + 12 * sd) + 1)
    head = math.lgamma(trials + 1)
    logs = [head - math.lgamma(k + 1) - math.lgamma(trials - k + 1) + k * math.log(p) + (trials - k) * math.log1p(-p)
            for k in range(lo, hi + 1)]
    top = max(logs)
    mass = [math.exp(x - top) for x in logs]
    total = sum(mass)
    out, cdf, k = [], 0.0, lo - 1
    for q in probs:
        while cdf < q * total and k < hi:
            k += 1
            cdf += mass[k - lo]
        out.append(max(k, 0))
    return out


def random_routing_rows(rows: int, local_experts: int, experts: int, top_k: int):
    """``--moe-force-load-balancing``: token copies of each of a rank's ``local_experts`` experts when the router's
    logits are random (Megatron-Core's ``moe_router_force_load_balancing``: ``RandomSTE`` replaces them with
    ``logits.clone().normal_()``, NVIDIA/Megatron-LM 2a75ac12 ``megatron/core/transformer/moe/moe_utils.py``,
    ``router.py`` ``TopKRouter.forward``), which Megatron-Bridge's benchmark recipes set: each token's top-k of E
    i.i.d. normal logits is a uniformly random set of k experts, so an expert gets each of the EP group's tokens with
    probability k / E, and its copies are Binomial(T, k / E), T = ``rows x E / (local_experts x top_k)`` the group's
    tokens (balanced mean ``rows / local_experts``). The local experts get that law's quantiles at
    ``(i + 0.5) / local_experts`` (a deterministic stand-in for one draw: the spread the GEMMs see, whose tile
    counts step at multiples of the tile, where the even split may sit exactly), then +-1 row at a time from the
    middle expert outwards until they add up to ``rows`` (the all-to-all bytes stay the mean's), in ascending
    order."""
    if local_experts < 2 or rows <= 0:
        return split_evenly(rows, local_experts)
    p = top_k / experts
    trials = round(rows * experts / (local_experts * top_k))
    out = _binomial_quantiles(trials, p, [(i + 0.5) / local_experts for i in range(local_experts)])
    middle = sorted(range(local_experts), key=lambda i: (abs(2 * i - (local_experts - 1)), i))
    step = 0
    while sum(out) != rows:
        i = middle[step % local_experts]
        delta = 1 if sum(out) < rows else -1
        if out[i] + delta >= 0:
            out[i] += delta
        step += 1
    return tuple(sorted(out))


@lru_cache(maxsize=None)
def expected_max_std_normal(n: int) -> float:
    """E[max of ``n`` i.i.d. standard normals]: the integral of ``x * n * phi(x) * Phi(x) ** (n - 1)`` by the
    trapezoid rule over [-12, 12] in steps of 1/1024 (0 for n = 1; 1/sqrt(pi) = 0.5642 for n = 2, 1.4236 for 8,
    1.7660 for 16, as the order-statistics tables give)."""
    if n < 2:
        return 0.0
    step, lim = 1.0 / 1024, 12.0
    points = int(2 * lim / step)
    total = 0.0
    for i in range(points + 1):
        x = -lim + i * step
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
        term = x * n * math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * cdf ** (n - 1)
        total += term * (0.5 if i in (0, points) else 1.0)
    return total * step


def busiest_rank_rows(rows: int, local_experts: int, experts: int, top_k: int, ep: int) -> int:
    """``--moe-force-load-balancing`` in training: the token copies of the busiest of the ``ep`` ranks of an EP
    group, the rank every other one waits for. Under the random router (:func:`random_routing_rows`) each of the
    group's ``T = rows x E / (L x k)`` tokens puts a Hypergeometric(E, L, k) number of its k copies on a rank's L
    experts, independently, so a rank's copies have mean ``rows`` and variance ``T k (L/E)(1 - L/E)(E - k)/(E -
    1)``; the ``ep`` ranks' copies add up to ``T k`` exactly (correlation -1/(ep - 1)), which is ``sigma
    sqrt(ep/(ep - 1)) (Y_i - mean(Y))`` for i.i.d. standard normal Y, so the busiest rank expects
    ``rows + sigma sqrt(ep/(ep - 1)) E[max of ep normals]`` (:func:`expected_max_std_normal`), rounded, at most
    ``T x min(k, L)``. Why it is paid: each MoE layer's combine all-to-all cannot finish before the last rank's
    experts send their rows (NCCL's all-to-all completes a receive only when its sender posts it; Megatron-Core's
    ``MoEAlltoAllTokenDispatcher.token_combine``, NVIDIA/Megatron-LM 2a75ac12 ``token_dispatcher.py``), so every
    rank's step carries the busiest rank's expert phase, a fresh draw every layer and micro-batch (RandomSTE's
    ``normal_()`` on each forward). GPT-OSS 120B (EP 8, L 16, E 128, k 4, 16,384 copies): sigma 118.3, +180 rows
    (+1.10 %)."""
    if ep < 2 or rows <= 0:
        return rows
    tokens = rows * experts / (local_experts * top_k)
    share = local_experts / experts
    variance = tokens * top_k * share * (1.0 - share) * (experts - top_k) / (experts - 1)
    extra = math.sqrt(variance * ep / (ep - 1)) * expected_max_std_normal(ep)
    return min(rows + round(extra), round(tokens) * min(top_k, local_experts))


def local_expert_rows(dims: ModelDims, cfg: "LlmConfig", tokens: int, moe_index: int, ep_index: int,
                      rows: int):
    """Token copies each of EP rank ``ep_index``'s E/EP experts computes in MoE layer ``moe_index``, adding
    up to ``rows`` (what the rank's grouped expert GEMMs carry): with ``--moe-expert-load``, EP x the copies
    every rank sends to that expert (:func:`expert_copies`); with ``--moe-force-load-balancing`` the random
    router's spread (:func:`random_routing_rows`); otherwise ``rows`` split evenly (:func:`split_evenly`:
    balanced routing, a capacity factor, or the ``--moe-imbalance`` straggler whose experts are all equally
    busy)."""
    per_rank = dims.experts // cfg.ep
    if getattr(cfg, "moe_force_load_balancing", False):
        return random_routing_rows(rows, per_rank, dims.experts, dims.top_k)
    if not cfg.moe_expert_load:
        return split_evenly(rows, per_rank)
    per_expert = expert_copies(dims, cfg, tokens, moe_index)
    return tuple(cfg.ep * c for c in per_expert[ep_index * per_rank:(ep_index + 1) * per_rank])
