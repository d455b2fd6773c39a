"""A decoder of the user's own, from ``path/to/file.py:factory``: the factory takes no
arguments and returns an object that follows the decoder protocol of
:mod:`parastream.decode.model` (``config`` with ``vocab`` and ``context``, ``new_pool``,
``new_cache``, ``prefill``, ``decode``)."""

from __future__ import annotations

import os
import runpy
from typing import Any

from ..errors import InputError, one_line

#: what a decoder object must have
PROTOCOL = ("config", "new_pool", "new_cache", "prefill", "decode")


def is_factory_spec(spec: str) -> bool:
    """Whether ``spec`` names a factory in a Python file (``file.py:name``)."""
    path, colon, attr = spec.rpartition(":")
    return bool(colon and path.endswith(".py") and attr)


def load_factory(spec: str) -> Any:
    """The decoder ``path/to/file.py:factory`` builds; InputError naming the file when it
    cannot be imported, has no such factory, the factory fails, or what it returns does
    not follow the protocol."""
    path, _, attr = spec.rpartition(":")
    if not os.path.isfile(path):
        raise InputError(path, "no such file")
    try:
        names = runpy.run_path(path, run_name="_parastream_decoder")
    except (Exception, SystemExit) as exc:  # the file's own error, quoted on one line
        raise InputError(path, f"failed to import: {one_line(exc)}") from None
    factory = names.get(attr)
    if not callable(factory):
        raise InputError(path, f"no factory named {attr!r}")
    try:
        model = factory()
    except (Exception, SystemExit) as exc:
        raise InputError(path, f"factory {attr}() failed: {one_line(exc)}") from None
    missing = [n for n in PROTOCOL if not hasattr(model, n)]
    missing += [f"config.{n}" for n in ("vocab", "context")
                if "config" not in missing and not hasattr(model.config, n)]
    if missing:
        raise InputError(path, f"{attr}() returned a {type(model).__name__} without "
                               f"{', '.join(missing)}: see the decoder protocol in "
                               "parastream.decode.model")
    return model


__all__ = ["PROTOCOL", "is_factory_spec", "load_factory"]
