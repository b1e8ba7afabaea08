"""The training engine: batch plan, training loop, checkpoints, launch."""
