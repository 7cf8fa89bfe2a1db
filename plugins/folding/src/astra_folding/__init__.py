"""Symmetry folding: simulate one rank per class of ranks that must behave identically.

* :mod:`~astra_folding.symmetry`: the groups of rank relabellings (block shifts) that workloads declare;
* :mod:`~astra_folding.groups`: how communicator groups map under them;
* :mod:`~astra_folding.signature`: what must match between a rank's trace and its image;
* :mod:`~astra_folding.search`: the largest symmetry a run's inputs keep;
* :mod:`~astra_folding.plan`: one run's decision (backends, traces, collectives) and its report;
* :mod:`~astra_folding.engine`: the folded run's event order (its engine delegates to it) and its exactness check;
* :mod:`~astra_folding.matcher`: its send/receive matcher (messages to ranks not simulated are mirrored).

Workload plugins declare symmetries with :mod:`astra_folding.symmetry` (compact workloads carry one); the kernel
asks the ``astra_fold_planner`` hook whether a run folds; without this plugin every rank is simulated. The names
below load on first use, so that importing ``astra_folding.symmetry`` does not load the folding engine.
"""

from importlib import import_module

_HOME = {
    "engine": ("EventHistory", "FoldedEvents", "FoldTieBroken"),
    "search": ("FoldPlan", "candidate_blocks", "check_declared_symmetry", "check_equivariant", "dimension_strides",
               "find_symmetry", "shift_refuses", "split_by_dimensions", "sub_shift_is_equivariant"),
    "signature": ("TraceSignature", "trace_signature"),
    "symmetry": ("EXACT", "ROTATION", "SET", "XOR", "BlockShift", "RankSymmetry", "group_key", "shift_image"),
    "groups": ("FoldRefused", "canonical_group_ids", "group_relabelling", "tags_stay_apart"),
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}


def __getattr__(name):
    """PEP 562: the public names, each imported from its module when first asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'astra_folding' has no attribute {name!r}")
    return getattr(import_module(f"astra_folding.{module}"), name)


__all__ = [
    "EXACT", "ROTATION", "SET", "BlockShift", "EventHistory", "FoldPlan", "FoldRefused", "FoldTieBroken",
    "FoldedEvents", "RankSymmetry", "TraceSignature", "canonical_group_ids", "candidate_blocks",
    "check_declared_symmetry", "check_equivariant", "dimension_strides", "find_symmetry", "group_key",
    "group_relabelling", "shift_image", "shift_refuses", "split_by_dimensions", "sub_shift_is_equivariant",
    "tags_stay_apart", "trace_signature", "XOR",
]
