"""Symmetry folding: simulate one rank per class of ranks that must behave identically.

* :mod:`~astra_folding.groups`: the groups of rank relabellings (block shifts) and how communicator
  groups map under them;
* :mod:`~astra_folding.signature`: what must match between a rank's trace and its image;
* :mod:`~astra_folding.search`: the largest symmetry a run's inputs keep;
* :mod:`~astra_folding.plan`: one run's decision (backends, traces, collectives) and its report;
* :mod:`~astra_folding.engine`: the folded run's event order (its engine delegates to it) and its exactness check;
* :mod:`~astra_folding.matcher`: its send/receive matcher (messages to ranks not simulated are mirrored).

The kernel declares symmetries (:mod:`astra_sim.symmetry`: compact workloads carry one) and asks the
``astra_fold_planner`` hook whether a run folds; without this plugin every rank is simulated.
"""

from astra_folding.engine import EventHistory, FoldedEvents, FoldTieBroken
from astra_folding.search import (
    FoldPlan, candidate_blocks, check_declared_symmetry, check_equivariant, dimension_strides, find_symmetry,
    shift_refuses, split_by_dimensions, sub_shift_is_equivariant,
)
from astra_folding.signature import TraceSignature, trace_signature
from astra_folding.groups import (
    EXACT, ROTATION, SET, BlockShift, FoldRefused, RankSymmetry, canonical_group_ids, group_key,
    group_relabelling, shift_image, tags_stay_apart,
)

__all__ = [
    "EXACT", "ROTATION", "SET", "BlockShift", "EventHistory", "FoldPlan", "FoldRefused", "FoldTieBroken",
    "FoldedEvents", "RankSymmetry", "TraceSignature", "canonical_group_ids", "candidate_blocks",
    "check_declared_symmetry", "check_equivariant", "dimension_strides", "find_symmetry", "group_key",
    "group_relabelling", "shift_image", "shift_refuses", "split_by_dimensions", "sub_shift_is_equivariant",
    "tags_stay_apart", "trace_signature",
]
