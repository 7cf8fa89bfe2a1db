"""User-facing errors.

Every error a user can cause is an :class:`AstraError`: the CLI prints its
message (which names the file, node or key and what was expected) and exits
non-zero, without a traceback.
"""


class AstraError(Exception):
    """Base class of every error caused by the user's input or setup."""

    exit_code = 2


class ConfigError(AstraError):
    """A configuration file or flag is missing, malformed or inconsistent."""


class InfeasibleError(ConfigError):
    """The configuration is valid but cannot run on the machine described (e.g. a rank needs more memory than
    its GPU has); a sweep records such a point as infeasible rather than as an error."""


class WorkloadError(AstraError):
    """A workload trace cannot be simulated (bad node, bad graph, ...)."""


class PluginError(AstraError):
    """A plugin cannot be loaded, or two plugins register the same name."""


class SimulationError(AstraError):
    """The simulation reached a state that has no valid continuation."""

    exit_code = 3


class DeadlockError(SimulationError):
    """No event is left but some ranks have not finished their workload."""


class FoldAbandoned(Exception):
    """A folded run cannot finish exactly (a tie it cannot order, or stuck ranks and unmatched messages
    whose report needs real rank numbers): :class:`astra_sim.simulation.Simulation` runs it again unfolded.
    Not an :class:`AstraError`: the user never sees it."""
