"""Reflect-then-retry: reflections, the oracle, expert demonstrations, stitched groups."""
