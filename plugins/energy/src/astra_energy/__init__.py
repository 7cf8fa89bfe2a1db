"""Power, clocks and energy for astra-sim-py (see docs/energy.md)."""
