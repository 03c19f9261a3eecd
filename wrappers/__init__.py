"""Agent-side wrappers: prompt rendering, action parsing, rollout and reflect-retry (see the open issues)."""

__all__: list[str] = []
