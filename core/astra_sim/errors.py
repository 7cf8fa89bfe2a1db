"""User-facing errors: every error a user can cause is an :class:`AstraError`, whose message (naming the file, node
or key and what was expected) the CLI prints without a traceback, exiting non-zero."""


class AstraError(Exception):
    """Base class of every error caused by the user's input or setup."""

    exit_code = 2


class ConfigError(AstraError):
    """A configuration file or flag is missing, malformed or inconsistent."""


class InfeasibleError(ConfigError):
    """A valid configuration the machine cannot run (more memory than its GPU has): a sweep's infeasible point."""


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
    """A folded run cannot finish exactly (a tie it cannot order; stuck ranks or unmatched messages to name): the run
    is simulated again unfolded. Not an :class:`AstraError`: the user never sees it."""
