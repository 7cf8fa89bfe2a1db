"""Earlier home of symmetry folding; it lives in :mod:`astra_sim.folding` now (these names stay importable)."""

from astra_sim.folding import *  # noqa: F401,F403
from astra_sim.folding import __all__  # noqa: F401
