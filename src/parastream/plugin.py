"""Code found by name: a ``"module:attribute"`` string, imported when first needed.

Lower layers reach a backend's own pieces (the runtime's backend factories, the device cost
models, the simulator's resources) through such names, so they never import the package
that provides them.
"""

from __future__ import annotations

import importlib
from typing import Any


def load(target: str) -> Any:
    """The attribute ``target`` (``"module:attribute"``) names, its module imported."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
