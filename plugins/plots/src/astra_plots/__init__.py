"""``astra plot``: pictures of astra-sim-py reports and timelines (matplotlib, headless)."""
