"""The training loop: config, group builders, evaluation, checkpoints, metrics, progress."""
