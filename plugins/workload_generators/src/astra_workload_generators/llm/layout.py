"""Where every rank sits (Megatron's ``parallel_state``): rank coordinates, communicator groups, the symmetry
that relates ranks of one stage, and the per-rank attributes (group ids, peers) appended to a stage's graph.

``rank = t + TP * (c + CP * (d + DP * p))`` (tensor-parallel index fastest, then context-parallel, then
data-parallel, then pipeline stage). Communicator groups (``PREFIX.groups.json``): TP groups first (ids 1..),
then DP groups, then PP groups, then EP / expert-DP, CP and DP x CP and FP8 amax groups; groups of size 1 are
not written and get no collectives.
"""

from __future__ import annotations

from astra_sim.chakra.writer import make_node
from astra_folding.symmetry import BlockShift

from .config import LlmConfig


def rank_of(cfg: LlmConfig, t, d, p, c=0):
    """``t + TP*(c + CP*(d + DP*p))`` (CP = 1: ``t + TP*(d + DP*p)``)."""
    return t + cfg.tp * (c + cfg.cp * (d + cfg.dp * p))


def coords_of(cfg: LlmConfig, rank):
    """(t, d, p) of a rank (see :func:`cp_coords_of` for the CP index)."""
    t, _, d, p = cp_coords_of(cfg, rank)
    return t, d, p


def cp_coords_of(cfg: LlmConfig, rank):
    """(t, c, d, p) of a rank."""
    t, rest = rank % cfg.tp, rank // cfg.tp
    return t, rest % cfg.cp, (rest // cfg.cp) % cfg.dp, rest // (cfg.cp * cfg.dp)


def comm_groups(cfg: LlmConfig, embedding: bool = False):
    """{'tp': {(d, p): id}, 'dp': {(t, p): id}, 'pp': {(t, d): id}, 'ep': {(t, p, q): id},
    'edp': {(t, p, e): id}} and the JSON mapping {id: ranks}. EP groups (DP indices q*EP .. q*EP+EP-1) and
    expert-data-parallel groups (DP indices = e mod EP) follow the PP groups, only when EP > 1. With CP > 1 the
    tp/dp/pp/ep keys end with the CP index c, and 'cp' {(t, d, p)} and 'dpcp' {(t, p)} groups follow. FP8
    training adds 'amax' {(p,)}: every rank of pipeline stage p (see _amax_reduction). ``embedding`` (the tied
    word-embedding gradient's all-reduce, :func:`.embedding.embedding_group_used`) adds last 'emb' {(t, d[, c])}:
    Megatron's embedding group, the first and the last stage's ranks of each pipeline group
    (``parallel_state.default_embedding_ranks``, Megatron-LM core_r0.14.0)."""
    ids = {"tp": {}, "dp": {}, "pp": {}, "ep": {}, "edp": {}, "cp": {}, "dpcp": {}, "amax": {}, "emb": {}}
    groups = {}

    def add(kind, key, members):
        """The next group id (ids count from 1 in order of creation)."""
        gid = len(groups) + 1
        ids[kind][key] = gid
        groups[str(gid)] = members

    cps = range(cfg.cp)
    # keys carry the CP index c only when CP > 1 (CP = 1: the historical keys and ids)
    k = (lambda *key, c: key + (c,)) if cfg.cp > 1 else (lambda *key, c: key)
    if cfg.tp > 1:
        for p in range(cfg.pp):
            for d in range(cfg.dp):
                for c in cps:
                    add("tp", k(d, p, c=c), [rank_of(cfg, t, d, p, c) for t in range(cfg.tp)])
    if cfg.dp > 1:
        for p in range(cfg.pp):
            for c in cps:
                for t in range(cfg.tp):
                    add("dp", k(t, p, c=c), [rank_of(cfg, t, d, p, c) for d in range(cfg.dp)])
    if cfg.pp > 1:
        for d in range(cfg.dp):
            for c in cps:
                for t in range(cfg.tp):
                    add("pp", k(t, d, c=c), [rank_of(cfg, t, d, p, c) for p in range(cfg.pp)])
    ep = cfg.ep
    if ep > 1:
        # EP groups inside one CP index (each CP rank routes its own sequence chunk); the expert-DP group of EP
        # rank e holds the same experts across the DP/EP blocks and every CP index
        for p in range(cfg.pp):
            for q in range(cfg.dp // ep):
                for c in cps:
                    for t in range(cfg.tp):
                        add("ep", k(t, p, q, c=c), [rank_of(cfg, t, q * ep + e, p, c) for e in range(ep)])
        if cfg.dp // ep * cfg.cp > 1:
            for p in range(cfg.pp):
                for e in range(ep):
                    for t in range(cfg.tp):
                        add("edp", (t, p, e), [rank_of(cfg, t, q * ep + e, p, c)
                                               for q in range(cfg.dp // ep) for c in cps])
    if cfg.cp > 1:
        for p in range(cfg.pp):
            for d in range(cfg.dp):
                for t in range(cfg.tp):
                    add("cp", (t, d, p), [rank_of(cfg, t, d, p, c) for c in cps])
        if cfg.dp > 1:
            for p in range(cfg.pp):
                for t in range(cfg.tp):
                    add("dpcp", (t, p), [rank_of(cfg, t, d, p, c) for d in range(cfg.dp) for c in cps])
    if _amax_reduction(cfg):
        for p in range(cfg.pp):
            add("amax", (p,), [rank_of(cfg, t, d, p, c) for d in range(cfg.dp) for c in cps for t in range(cfg.tp)])
    if embedding and cfg.pp > 1:
        for d in range(cfg.dp):
            for c in cps:
                for t in range(cfg.tp):
                    add("emb", k(t, d, c=c), [rank_of(cfg, t, d, 0, c), rank_of(cfg, t, d, cfg.pp - 1, c)])
    return ids, groups


def _amax_reduction(cfg):
    """FP8 training reduces the amaxes over the ranks of a pipeline stage (Megatron-core's amax reduction group:
    TP x DP x CP) after every forward and backward of a model chunk. Not torchao's tensorwise recipe (``--fp8-recipe
    tensorwise``): each cast takes its own tensor's amax and keeps no history to reduce (pytorch/ao eab345c
    ``float8_linear.py``; torchtitan 9dec370 syncs amaxes only under delayed scaling)."""
    return (cfg.gemm_dtype == "fp8" and not cfg.inference and cfg.fp8_recipe != "tensorwise"
            and cfg.tp * cfg.dp * cfg.cp > 1)


def _dyn_bytes(key, rank, cfg, gids):
    t, c, d, p = cp_coords_of(cfg, rank)
    cx = (c,) if cfg.cp > 1 else ()
    if key[0] == "tp":
        attrs = {"pg_name": str(gids["tp"][(d, p) + cx])}
    elif key[0] == "dp":
        attrs = {"pg_name": str(gids["dp"][(t, p) + cx])}
    elif key[0] == "dpcp":
        attrs = {"pg_name": str(gids["dpcp"][(t, p)])}
    elif key[0] == "cp":
        attrs = {"pg_name": str(gids["cp"][(t, d, p)])}
    elif key[0] == "ep":
        attrs = {"pg_name": str(gids["ep"][(t, p, d // cfg.ep) + cx])}
    elif key[0] == "edp":
        attrs = {"pg_name": str(gids["edp"][(t, p, d % cfg.ep)])}
    elif key[0] == "amax":
        attrs = {"pg_name": str(gids["amax"][(p,)])}
    elif key[0] == "emb":
        attrs = {"pg_name": str(gids["emb"][(t, d) + cx])}
    elif key[0] in ("tpsend", "tprecv"):  # ring neighbour in the TP group (--tp-comm-overlap)
        peer = rank_of(cfg, (t + key[1]) % cfg.tp, d, p, c)
        src, dst = (rank, peer) if key[0] == "tpsend" else (peer, rank)
        attrs = {"comm_src": src, "comm_dst": dst}
    elif key[0] in ("cpsend", "cprecv"):  # ring neighbour in the CP group
        peer = rank_of(cfg, t, d, p, (c + key[1]) % cfg.cp)
        src, dst = (rank, peer) if key[0] == "cpsend" else (peer, rank)
        attrs = {"comm_src": src, "comm_dst": dst}
    else:  # pipeline neighbour (interleaved: the last rank's next is rank 0)
        peer = rank_of(cfg, t, d, (p + key[1]) % cfg.pp, c)
        src, dst = (rank, peer) if key[0] == "send" else (peer, rank)
        attrs = {"comm_src": src, "comm_dst": dst}
    return make_node(0, attrs=attrs)._raw


def rank_symmetry(cfg: LlmConfig):
    """The relabellings of ranks that map every rank's trace onto another's (block shifts of the rank's digits,
    :class:`astra_folding.symmetry.BlockShift`): the TP position, the CP position and the DP replica. With EP > 1
    the DP index is ``e + EP*q`` (EP groups hold the q-th EP consecutive DP indices, expert-data-parallel groups
    one e): e and q are shifted apart; with ``--moe-expert-load`` each e computes its own experts' rows, so
    only q. Pipeline stages differ."""
    shifts = []
    if cfg.tp > 1:
        shifts.append(BlockShift(1, cfg.tp, cfg.tp))
    if cfg.cp > 1:
        shifts.append(BlockShift(cfg.tp, cfg.cp, cfg.cp))
    stride = cfg.tp * cfg.cp
    if cfg.ep > 1:
        if not cfg.moe_expert_load:
            shifts.append(BlockShift(stride, cfg.ep, cfg.ep))
        outer = cfg.dp // cfg.ep
        if outer > 1:
            shifts.append(BlockShift(stride * cfg.ep, outer, outer))
    elif cfg.dp > 1:
        shifts.append(BlockShift(stride, cfg.dp, cfg.dp))
    return shifts
