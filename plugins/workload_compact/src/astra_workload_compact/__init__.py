"""The compact workload format, a plugin of astra-sim-py: each distinct trace once, plus a rank map
(``PREFIX.workload.json``).

A job of thousands of ranks repeats a few traces: every data-parallel replica and every tensor-parallel
position does what the others do, with its own peers and communicators. Per-rank files would be tens of
gigabytes; the compact form stores one Chakra ET file per *class* of ranks and a manifest that says how
every rank's trace follows from its class's. ``astra run --workload-configuration PREFIX`` reads it as it
reads per-rank files (``PREFIX.<rank>.et``); ``astra workload expand PREFIX -o OUT`` writes the per-rank
files for tools that need them. The format is documented in ``docs/compact-workload.md``.

Manifest (JSON)::

    {"format": "astra-sim-compact-workload", "version": 1, "npus": 256,
     "symmetry": [{"stride": 1, "radix": 8, "block": 8}, {"stride": 8, "radix": 16, "block": 16}],
     "classes": [{"representative": 0, "trace": "g.class0.et"},
                 {"representative": 128, "trace": "g.class1.et"}],
     "comm_groups": "g.groups.json"}

``symmetry`` lists block shifts of the rank number (:class:`astra_folding.symmetry.BlockShift`): shift ``k``
moves the digit ``(rank // stride) % radix`` one place on, cyclically inside blocks of ``block``
consecutive values; the digits of different shifts do not overlap. Two ranks are in one class when shifts
map one to the other; the class's representative is its smallest rank (every shifted digit at its block's
start). ``classes`` gives each representative's trace (a path relative to the manifest). Rank ``q`` of the
class of ``r`` runs ``r``'s trace relabelled by the shifts ``h`` that map ``r`` to ``q``: every
``comm_src`` / ``comm_dst`` rank ``x`` becomes ``h(x)``, and every ``pg_name`` naming a communicator group
becomes the group whose members are ``h`` of its members (the first such group in id order, the second
for the second group with the same members, and so on). ``comm_groups``, optional, names the groups file
(relative to the manifest) the traces' ``pg_name`` s refer to; ``astra run`` uses it when no
``--comm-group-configuration`` is given.

The format is registered as ``compact`` (hook ``astra_register_workload_formats``, :mod:`.plugin`); the kernel
reads it through the format's ``compact(prefix)`` (:class:`astra_sim.api.CompactWorkload`). Python:
:func:`write_compact_workload`, :func:`read_compact_workload`, :func:`read_rank_nodes` (either layout),
:func:`expand_workload`, :class:`Relabeller`; :func:`hold_compact_workload`, :func:`trace_nodes` and
:func:`ensure_written` for class traces a generator holds in memory for a run in its own process
(:mod:`astra_workload_compact.memory`).
"""

from astra_workload_compact.manifest import (
    FORMAT, MANIFEST_SUFFIX, VERSION, CompactWorkload, is_compact, manifest_path, read_compact_workload, roles_path,
    write_compact_workload,
)

#: names loaded on first use (PEP 562): a run that reads no compact workload needs neither held traces (memory) nor the
#: relabeller (which loads the Chakra reader), and a run reads the manifest only, never the expansion
_LAZY = {"ensure_written": "memory", "hold_compact_workload": "memory", "trace_nodes": "memory",
         "RANK_ATTRS": "relabel", "Relabeller": "relabel", "expand_workload": "expand", "read_rank_nodes": "expand"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'astra_workload_compact' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"astra_workload_compact.{module}"), name)

__all__ = ["CompactWorkload", "FORMAT", "MANIFEST_SUFFIX", "RANK_ATTRS", "Relabeller", "VERSION", "ensure_written",
           "expand_workload", "hold_compact_workload", "is_compact", "manifest_path", "read_compact_workload",
           "read_rank_nodes", "roles_path", "trace_nodes", "write_compact_workload"]
