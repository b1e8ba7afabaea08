"""The training engine: batch plan, training loop, run directory."""
