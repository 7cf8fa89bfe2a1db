"""Earlier home of the folded run's engine; it lives in :mod:`astra_sim.folding.engine` now."""

from astra_sim.folding.engine import EventHistory, FoldedEventEngine, FoldTieBroken  # noqa: F401

__all__ = ["EventHistory", "FoldedEventEngine", "FoldTieBroken"]
