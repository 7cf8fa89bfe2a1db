"""astra serve: an LLM inference-serving simulator on top of astra-sim-py's step simulator."""
