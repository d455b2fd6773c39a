"""parastream: plan, run and verify multi-stream inference on NPUs and GPUs."""

__version__ = "0.1.0"
