"""Time folding a run whose ranks are folded by symmetry (:mod:`astra_folding.time_fold`): why the folded engine's
tie check stays exact when its histories are reset at the compared points.

*What is absolute.* A folded run's event carries an :class:`~astra_folding.engine.EventHistory`: ``root`` (a rank),
``rel`` (offsets of the symmetry), ``taint`` (a cell shared with its descendants) and ``times``, a digest of the
absolute times at which its ancestors were scheduled, back to the ranks' starts. The tie check
(:meth:`~astra_folding.engine.FoldedEvents.tie_check`) compares two events of one rank at one nanosecond only when
their ``times`` are equal, and then decides from ``root``, ``rel``, ``taint`` and the two callbacks. ``times`` is
never the same relative to now (a chain only grows), so it cannot be compared as it is, nor moved on by a jump
(the chain of an event ``k`` periods on holds ``k`` more periods of ancestors).

*The reset.* At every compared point (the end of a nanosecond), every pending event's ``times`` is set to
:data:`RESET_TIMES`; ``root``, ``rel``, ``taint`` and which events share a taint cell are written in the compared
state. Call the run so made the reset run. It runs the same events in the same order as the folded run (histories
decide no order, only whether the check raises), and its check is at least as strict:

1. Two events compared by the folded run are compared by the reset run. Their chains are
   ``tail ++ chain(x)``, ``x`` their nearest ancestor pending at the reset. Every time in a tail is after the
   reset's nanosecond (no reset is made while an event is pending at that nanosecond), every time in
   ``chain(x)`` at or before it, so equal chains have equal tails and equal
   ``chain(x)``: the reset chains (``tail ++ [RESET_TIMES]``) are equal too.
2. A pair both compare passes in the folded run when it passes in the reset run, by induction on the events of
   the run: the check passes a pair when its ``rel`` are equal and neither is tainted, or when neither is tainted
   and the order of their real events is the same at every member of the class (``root``, ``rel``), or when the
   two callbacks are the same call or commute. Only the taints can differ, and the reset run taints a superset
   (it taints only pairs that fail the first two tests, which a superset of taints fails as well).

So a reset run that raises nothing proves the folded run raises nothing, which proves the fold exact (the folded
engine's guarantee); one that raises is simulated again unfolded, as any fold that breaks a tie. Between two
resets the check's grouping depends only on times relative to the reset (both chains move by the same ``P``), so
a period of the reset run from B repeats the one from A, resets included at their images, when ``root``, ``rel``,
taints and shared cells are equal at A and B (compared) and the trace repeats (checked, :mod:`astra_folding.
time_fold`): the repeats raise nothing (the period raised nothing), and the jumped state is the reset run's
state ``k`` periods on, the histories of B included. Resetting costs only strictness: a pair with different
histories before the reset but equal tails after it is checked where the folded run would not check it.
"""

#: the ``times`` every pending event's history gets at a compared point (any value: only equality is read)
RESET_TIMES = 0
