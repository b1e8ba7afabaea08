"""bench: an open benchmarking suite for large-batch ImageNet training."""

__version__ = "0.1.0"
