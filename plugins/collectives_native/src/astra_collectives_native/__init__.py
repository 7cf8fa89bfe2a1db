"""The reference's native collective algorithms, as packet state machines.

* :class:`Ring` and :class:`Direct` (module :mod:`astra_collectives_native.ring`): ``ring``, ``oneRing``,
  ``direct``, ``oneDirect``.
* :class:`HalvingDoubling` (module :mod:`astra_collectives_native.halving_doubling`): ``halvingDoubling``,
  ``oneHalvingDoubling``.
* :class:`DoubleBinaryTree` (module :mod:`astra_collectives_native.double_binary_tree`): ``doubleBinaryTree``.

The send pattern, the bookkeeping order and every delay follow the reference simulator exactly, because
per-rank finish times must match it to the nanosecond. Other plugins may subclass these classes (they build
on :class:`astra_sim.system.collectives.Algorithm`).
"""

from astra_collectives_native.double_binary_tree import DoubleBinaryTree
from astra_collectives_native.halving_doubling import HalvingDoubling
from astra_collectives_native.ring import LOCAL_RING_DELAY_NS, Direct, Ring

__all__ = ["LOCAL_RING_DELAY_NS", "Direct", "DoubleBinaryTree", "HalvingDoubling", "Ring"]
