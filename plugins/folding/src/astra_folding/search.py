"""The symmetry search: the largest group of block shifts every input of a run is invariant under
(:func:`find_symmetry`), or the part of a compact workload's declared symmetry the run keeps
(:func:`check_declared_symmetry`)."""

from __future__ import annotations

from dataclasses import dataclass

from astra_sim.chakra import types as T
from astra_folding.groups import (
    _DEFAULT_PG, EXACT, ROTATION, SET, XOR, BlockShift, FoldRefused, RankSymmetry, canonical_group_ids,
    group_relabelling, shift_image, tags_stay_apart,
)


def candidate_blocks(radix):
    """Block sizes to try for a dimension of ``radix`` NPUs, largest first (divisors > 1)."""
    return [b for b in range(radix, 1, -1) if radix % b == 0]


def dimension_strides(npus_per_dim):
    strides = []
    stride = 1
    for count in npus_per_dim:
        strides.append(stride)
        stride *= count
    return strides


def check_equivariant(shift, signatures, groups, equivalence):
    """Whether every rank's trace, relabelled by ``shift``, is the trace of the rank it maps to.

    ``signatures``: per rank, its :class:`TraceSignature` or :class:`LazySignature` (whose peers and groups
    are then read only for ranks whose structure matched). Returns None when it is, else a reason."""
    total = len(signatures)
    group_map = {}
    if groups:
        group_map = group_relabelling(groups, lambda r: shift_image(shift, r), equivalence)
        if group_map is None:
            return "a communicator group's image is not a communicator group"

    def image_pg(pg):
        if pg in _DEFAULT_PG:
            return pg
        try:
            target = group_map[int(pg)]
        except (KeyError, ValueError, TypeError):
            return object()  # an undefined group: never equal (the run will report it)
        return type(pg)(target) if isinstance(pg, str) else target

    def image_peer(peer):
        if peer is None or isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < total:
            return peer
        return shift_image(shift, peer)

    checked = set()
    # one trace object for every rank (a data-parallel step): every rank is the same pair, so rank 0 answers for all
    alike = total > 0 and all(sig is signatures[0] for sig in signatures)
    for rank in range(1 if alike else total):
        mine = signatures[rank]
        target = shift_image(shift, rank)
        image = signatures[target]
        pair = (id(mine), id(image))
        if pair in checked:  # the relabelling does not depend on the rank: same pair, same answer
            continue
        if not mine.same_structure(image):  # digested only as far as they are alike
            return f"rank {rank}'s trace and rank {target}'s differ"
        if tuple((image_peer(a), image_peer(b)) for a, b in mine.peers) != image.peers:
            return f"rank {rank}'s send/receive peers, relabelled, are not rank {target}'s"
        if tuple(image_pg(pg) for pg in mine.groups) != image.groups:
            return f"rank {rank}'s communicator groups, relabelled, are not rank {target}'s"
        checked.add(pair)
    return None


_EQUIVALENCE_OF = {"any": SET, "rotation": ROTATION, "xor": XOR}


def _meet(first, second):
    """The equivalence of member lists that keeps both (``rotation`` and ``xor`` together: ``exact``)."""
    if first == second or second == SET:
        return first
    return second if first == SET else EXACT


@dataclass
class FoldPlan:
    """The outcome of :func:`find_symmetry`: the group (possibly trivial) and what limited it."""

    symmetry: RankSymmetry
    canonical_groups: dict
    notes: list


def _collective_needs(signatures, native_impls, group_impl):
    """What the traces' collectives need of a symmetry: the collective types run on the default group, and
    the equivalence the communicator groups' images must keep (``exact``, ``rotation`` or ``set``)."""
    if any(sig.declares_groups for sig in signatures):
        raise FoldRefused("a trace declares process groups in METADATA nodes")
    native = set().union(*(sig.native_collectives for sig in signatures)) if signatures else set()
    grouped = set().union(*(sig.group_collectives for sig in signatures)) if signatures else set()
    for comm_type in sorted(native):
        if any(spec.topology == "tree" for spec, _window in native_impls(comm_type)):
            # Its trees are laid over the first NPUs of the dimensions it does not list: not a relabelling.
            raise FoldRefused(f"the {T.comm_type_name(comm_type)} algorithm doubleBinaryTree depends on rank "
                              "positions")
    equivalence = SET
    messages = False  # whether communicator-group collectives exchange messages (whose tags must not meet)
    for comm_type in sorted(grouped):
        spec = group_impl(comm_type)
        if spec is None:
            continue
        equivalence = _meet(equivalence, _EQUIVALENCE_OF.get(getattr(spec, "symmetry", None), EXACT))
        messages = messages or getattr(spec, "exchanges_messages", True)
    return native, (equivalence, messages)


def _finish_plan(shifts, groups, needs, notes):
    equivalence, messages = needs
    symmetry = RankSymmetry(shifts)
    canonical = {}
    if groups and shifts:
        canonical = canonical_group_ids(groups, symmetry, equivalence)
        if canonical is None or (messages and not tags_stay_apart(groups, canonical)):
            notes.append("communicator groups sharing NPUs would share message tags when folded")
            return FoldPlan(RankSymmetry(()), {}, notes)
    return FoldPlan(symmetry, canonical, notes)


def find_symmetry(npus_per_dim, dim_kinds, signatures, groups, native_impls, group_impl):
    """The largest symmetry of block shifts (one per dimension) that every input is invariant under.

    ``dim_kinds``: per network dimension, ``"rotation"`` (only cyclic shifts of the whole dimension keep
    its delays, e.g. a ring) or ``"any"`` (every permutation of its coordinates does: a switch, a fully
    connected dimension). ``signatures``: per rank, its :class:`TraceSignature` or :class:`LazySignature`
    (the same object for ranks that share a trace). ``groups``: the communicator groups
    ``{id: [npu, ...]}``. ``native_impls(comm_type)``: the ``(spec, window)`` list of a collective on the
    default group; ``group_impl(comm_type)``: the spec a communicator-group collective runs. Raises
    :class:`FoldRefused` when nothing may fold at all.
    """
    notes = []
    native, needs = _collective_needs(signatures, native_impls, group_impl)
    equivalence = needs[0]
    strides = dimension_strides(npus_per_dim)
    shifts = []

    def refuses(shift):
        return (shift_refuses(shift, npus_per_dim, dim_kinds, native, native_impls)
                or check_equivariant(shift, signatures, groups, equivalence))

    for dim, radix in enumerate(npus_per_dim):
        # Walk up the dimension's coordinate: at each position the largest digit whose rotation is a
        # symmetry (e.g. TP positions, then the data-parallel replicas sharing a node), else, for the
        # rest of the coordinate, the largest block whose rotation is.
        position = 1
        first_why = None  # why the whole dimension does not fold (the most telling reason)
        while position < radix:
            rest = radix // position
            found = None
            for size in sorted((r for r in range(2, rest + 1) if rest % r == 0), reverse=True):
                why = refuses(BlockShift(strides[dim] * position, size, size))
                if why is None:
                    found = BlockShift(strides[dim] * position, size, size)
                    break
                if first_why is None:
                    first_why = why
            if found is None:
                for block in candidate_blocks(rest)[1:]:
                    if refuses(BlockShift(strides[dim] * position, rest, block)) is None:
                        found = BlockShift(strides[dim] * position, rest, block)
                        break
            if found is None:
                position *= next(p for p in range(2, rest + 1) if rest % p == 0)
                continue
            shifts.append(found)
            position *= found.radix
        folded = [sh for sh in shifts if strides[dim] <= sh.stride < strides[dim] * radix]
        if not folded and radix > 1:
            notes.append(f"dimension {dim} not folded: {first_why}")
        elif folded and not (len(folded) == 1 and folded[0].radix == folded[0].block == radix):
            notes.append(f"dimension {dim} folded in parts {[sh.describe() for sh in folded]} "
                         f"(whole dimension: {first_why})")
    return _finish_plan(shifts, groups, needs, notes)


def check_declared_symmetry(declared, npus_per_dim, dim_kinds, signatures, groups, native_impls, group_impl,
                            class_nodes=None):
    """The part of a workload's declared symmetry (a compact workload's, whose traces are equivariant by
    construction) that the network, the collective algorithms and the communicator groups keep too.

    A declared shift whose digit spans several network dimensions moves ranks across them (it does not keep
    the network's delays); the shifts of its parts inside each dimension may, or, where halving-doubling keeps no
    rotation, the flips of a part's bits (:func:`bit_flips`): each is tried instead, and
    kept when the traces are equivariant under it too (:func:`sub_shift_is_equivariant`, which needs
    ``class_nodes``, each representative's nodes). ``signatures``: those of the class traces. Returns a
    :class:`FoldPlan` of the accepted shifts."""
    notes = []
    native, needs = _collective_needs(signatures, native_impls, group_impl)
    equivalence = needs[0]
    shifts = []
    named = {}  # what each class trace names (sub_shift_is_equivariant), read once for every part tried

    def accept(shift):
        why = shift_refuses(shift, npus_per_dim, dim_kinds, native, native_impls)
        if why is None and groups:
            if group_relabelling(groups, lambda r, s=shift: shift_image(s, r), equivalence) is None:
                why = f"a communicator group's image is not a communicator group (as a {equivalence} list)"
        return why

    for shift in declared.shifts:
        why = accept(shift)
        if why is None:
            shifts.append(shift)
            continue
        parts = split_by_dimensions(shift, npus_per_dim) if class_nodes is not None else []
        kept = []
        for part in parts:
            # A part refused whole may keep flips of its bits (halving-doubling's "xor"): each is tried on its own.
            for candidate in [part] if accept(part) is None else bit_flips(part):
                part_why = accept(candidate)
                if part_why is None and not sub_shift_is_equivariant(candidate, shift, declared, class_nodes, groups,
                                                                     named):
                    part_why = "the traces are not equivariant under it"
                if part_why is None:
                    kept.append(candidate)
        shifts.extend(kept)
        if kept:
            how = "spans network dimensions" if len(parts) > 1 else f"not kept whole ({why})"
            notes.append(f"shift of digit (rank // {shift.stride}) % {shift.radix} {how}: "
                         f"folded by its parts {[p.describe() for p in kept]}")
        else:
            notes.append(f"shift of digit (rank // {shift.stride}) % {shift.radix} not used: {why}")
    return _finish_plan(shifts, groups, needs, notes)


def split_by_dimensions(shift, npus_per_dim):
    """The parts of ``shift``'s digit inside each network dimension, as whole-part rotations (only for a
    shift that rotates its whole digit; its parts are then digits of their own)."""
    if shift.block != shift.radix:
        return []
    low, high = shift.stride, shift.stride * shift.radix
    parts = []
    for stride, count in zip(dimension_strides(npus_per_dim), npus_per_dim):
        a, b = max(low, stride), min(high, stride * count)
        if a < b and b % a == 0 and (b // a) > 1:
            parts.append(BlockShift(a, b // a, b // a))
    covered = 1
    for part in parts:
        covered *= part.radix
    return parts if covered == shift.radix else []


def bit_flips(shift):
    """The flips of each bit of a whole-digit rotation's power-of-two digit (shifts of radix 2), least significant
    first; none for other shifts."""
    radix = shift.radix
    if shift.block != radix or radix <= 2 or radix & (radix - 1):
        return []
    return [BlockShift(shift.stride << bit, 2, 2) for bit in range(radix.bit_length() - 1)]


def _moved_array(symmetry, ranks, offsets, sign=1):
    """:meth:`astra_folding.symmetry.RankSymmetry.moved` over a numpy array of ranks."""
    ranks = ranks.copy()
    for s, k in zip(symmetry.shifts, offsets):
        if k:
            within = (ranks // s.stride) % s.radix % s.block
            ranks += ((within + sign * k) % s.block - within) * s.stride
    return ranks


def sub_shift_is_equivariant(part, whole, declared, class_nodes, groups, named=None):
    """Whether the traces of a compact workload (each rank's is its class trace relabelled by the declared
    symmetry) are equivariant under ``part``, a shift of a part of the declared shift ``whole``'s digit.

    Rank ``r``'s trace is ``h_r`` of its class's, so equivariance at ``r`` means ``u = h_{part(r)}^-1 part h_r``
    fixes every rank its class trace names as a peer and maps every communicator group it names onto itself.
    ``u`` depends only on ``r``'s offset in ``whole``'s digit: one check per offset and class. ``named``: a
    dict that keeps what each class trace names (:func:`_named_ranks`) for the next call (the traces are read
    once for every part tried)."""
    import numpy as np  # here, not at import: every astra command loads this module, few need numpy

    index = declared.shifts.index(whole)
    for rep, nodes in class_nodes.items():
        found = named.get(rep) if named is not None else None
        if found is None:
            found = _named_ranks(nodes)
            if named is not None:
                named[rep] = found
        if found is False:
            return False
        peers, pgs = found
        members = {}
        for group_id in pgs:
            if group_id not in groups:
                return False
            members[group_id] = np.array(sorted(groups[group_id]), dtype=np.int64)
        if not peers and not members:
            continue  # nothing in the trace names a rank: every relabelling leaves it as it is
        peer_ranks = np.array(sorted(peers), dtype=np.int64)

        def u(ranks, offsets, back):
            moved = _moved_array(declared, ranks, offsets)
            within = (moved // part.stride) % part.radix % part.block
            moved += ((within + 1) % part.block - within) * part.stride
            return _moved_array(declared, moved, back, -1)

        for k in range(whole.block):
            offsets = [0] * len(declared.shifts)
            offsets[index] = k
            back = declared.offsets(shift_image(part, declared.moved(rep, offsets)))
            if len(peer_ranks) and not np.array_equal(u(peer_ranks, offsets, back), peer_ranks):
                return False
            for group in members.values():
                if not np.array_equal(np.sort(u(group, offsets, back)), group):
                    return False
    return True


_NAMING_KEYS = frozenset(("comm_src", "comm_dst", "pg_name"))


def _named_ranks(nodes):
    """``(peers, process groups)`` a class trace names (its nodes' ``comm_src``, ``comm_dst`` and non-default
    ``pg_name``), or False when a ``pg_name`` is not a group id. Only the nodes that hold one of those keys
    are read in Python (picked in C: most nodes, kernels, hold none)."""
    from itertools import compress
    from operator import attrgetter, methodcaller, not_

    keys = map(methodcaller("keys"), map(attrgetter("attrs"), nodes))
    naming = map(not_, map(methodcaller("isdisjoint", _NAMING_KEYS), keys))
    peers, pgs = set(), set()
    for node in compress(nodes, naming):
        attrs = node.attrs
        for key in ("comm_src", "comm_dst"):
            value = attrs.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                peers.add(value)
        pg = attrs.get("pg_name")
        if pg not in _DEFAULT_PG:
            try:
                pgs.add(int(pg))
            except (TypeError, ValueError):
                return False
    return peers, pgs


def shift_refuses(shift, npus_per_dim, dim_kinds, native, native_impls):
    """Why ``shift`` would change the run's delays or its collectives on the default group (None if not).

    The shifted digit must lie inside one network dimension, so that the shift permutes that dimension's
    coordinates only; a ring dimension (and a native ring collective on it) keeps only the rotation of the
    whole dimension."""
    strides = dimension_strides(npus_per_dim)
    low, high = shift.stride, shift.stride * shift.radix
    for dim, (stride, count) in enumerate(zip(strides, npus_per_dim)):
        if stride <= low and high <= stride * count:
            if low % stride or (stride * count) % high:
                return f"the digit is not aligned with network dimension {dim}"
            whole = low == stride and shift.radix == shift.block == count
            flips = shift.radix == shift.block == 2 and _power_of_two(count) and _power_of_two(low // stride)
            return _dimension_refuses(dim, (whole, flips, flips and _power_of_two(low)), dim_kinds[dim], native,
                                      native_impls, npus_per_dim)
    return "the digit spans several network dimensions"


def _power_of_two(value):
    return value > 0 and not value & (value - 1)


def _dimension_refuses(dim, moves, kind, native, native_impls, npus_per_dim):
    """Why a permutation of dimension ``dim``'s coordinates would change the run (None if it would not).

    ``moves``: whether it is the rotation of the whole dimension, whether it flips one bit of the dimension's
    coordinate (of a power-of-two dimension), and whether that bit is a bit of the rank too. A collective declaring
    ``"xor"`` (halving-doubling: its partner is the index XOR a power of two) keeps every such flip of the index it
    pairs by: ``(i ^ m) ^ d == (i ^ d) ^ m``."""
    whole, flips, flips_rank = moves
    if kind == "rotation" and not whole:
        return "the network keeps its delays only under rotations of the whole dimension"
    if kind not in ("rotation", "any"):
        return "the network backend does not say how the dimension may be relabelled"
    for comm_type in sorted(native):
        impls = native_impls(comm_type)
        if not impls:
            continue
        what = T.comm_type_name(comm_type)
        first = impls[0][0]
        symmetry = getattr(first, "symmetry", None)
        if first.topology == "one":
            # One ring over every NPU in id order: only a rotation of the whole (only) dimension keeps it.
            alone = all(count == 1 for d, count in enumerate(npus_per_dim) if d != dim)
            if symmetry == "any" or (symmetry == "rotation" and alone and whole) or (symmetry == "xor" and flips_rank):
                continue
            if symmetry == "xor":
                return f"the {what} algorithm pairs NPUs by their id's bits: only flips of one bit of the id keep it"
            return f"the {what} algorithm walks one ring over all NPUs (in id order)"
        if dim >= len(impls):
            continue
        symmetry = getattr(impls[dim][0], "symmetry", None)
        if symmetry == "any":
            continue
        if symmetry == "rotation":
            if not whole:
                return f"the {what} ring of the dimension needs the whole dimension rotated"
            continue
        if symmetry == "xor":
            if not flips:
                return (f"the {what} algorithm of the dimension pairs NPUs by their coordinate's bits: only flips of one "
                        "bit keep it" + (", and a ring keeps its delays only under rotations of the whole dimension"
                                         if kind == "rotation" else ""))
            continue
        return f"the {what} algorithm of the dimension declares no symmetry (it depends on rank positions)"
    return None
