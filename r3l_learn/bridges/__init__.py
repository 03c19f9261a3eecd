"""Bridges to other stacks: TRL's trainers and an OpenAI-compatible server."""
