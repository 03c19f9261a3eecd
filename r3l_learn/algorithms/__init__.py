"""Algorithms as compositions: advantages, objectives, rows, one update."""
