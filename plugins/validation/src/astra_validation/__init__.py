"""``astra validate``: published measurements against astra-sim-py's simulation (see docs/validation.md)."""

from astra_validation.registry import Case, load_cases
from astra_validation.runner import run_case

__all__ = ["Case", "load_cases", "run_case"]
