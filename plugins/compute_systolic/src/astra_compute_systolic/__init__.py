"""Systolic-array compute (SCALE-sim's cycle model) for astra-sim-py."""
