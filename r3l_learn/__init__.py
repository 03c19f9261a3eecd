"""The R³L learner: policies, advantages, losses, the training loop and the ``r3l`` CLI (see the open issues)."""

__all__: list[str] = []
