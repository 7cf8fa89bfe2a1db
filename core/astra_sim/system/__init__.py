"""The system layer: collective decomposition, chunking, scheduling and algorithms."""
