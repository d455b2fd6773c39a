"""parastream: plan, run and verify multi-stream inference on NPUs and GPUs.

The library API is :mod:`parastream.api` (``from parastream import api as ps``): each
command as a function returning a typed result. The package root stays empty so that
``import parastream`` is cheap and the subpackages (``parastream.plan``,
``parastream.graph`` ...) keep their names. Nothing here imports torch.
"""

__version__ = "0.1.0"
