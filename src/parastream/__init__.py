"""parastream: plan, run and verify multi-stream inference on NPUs and GPUs.

The library API (:mod:`parastream.api`) is re-exported here: ``parastream.analyze``,
``graph``, ``plan``, ``simulate``, ``run``, ``emit``, ``demo``, ``pipeline`` and their
result types. ``import parastream`` never imports torch.

``parastream.graph``, ``plan``, ``emit``, ``demo`` and ``pipeline`` are the API's
functions; the subpackages and modules of those names are reached by import
(``from parastream.plan.io import loads``), not as attributes of the package.
"""

__version__ = "0.1.0"

# the modules whose names the API's functions take are imported first: importing a module
# binds its name in this package, and the functions are bound after, for good
from . import demo as _demo, emit as _emit, graph as _graph  # noqa: E402,F401
from . import pipeline as _pipeline, plan as _plan  # noqa: E402,F401
from .api import *  # noqa: E402,F401,F403
from .api import __all__ as _api_names  # noqa: E402

__all__ = ["__version__", *_api_names]
