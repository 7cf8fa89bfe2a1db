"""The workload layer: one Chakra dependency graph per rank, issued node by node."""
