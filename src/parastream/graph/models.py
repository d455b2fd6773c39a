"""Name a model, get its operator graph: a zoo name or a user's ``path/to/file.py:factory``.

The factory contract (docs/models.md): a callable that takes no arguments, or accepts the
keyword ``scale`` (and optionally ``phase``), and returns ``(module, example_inputs)`` where
``module`` is a ``torch.nn.Module`` and ``example_inputs`` a tuple of its positional inputs
(a single tensor is accepted too). Build large models on the ``meta`` device so nothing
real is allocated. Every failure is an :class:`~parastream.errors.InputError` that names the
file (or the zoo name) and says what is wrong. Nothing is cached on disk.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import uuid
from typing import Any, Callable, Iterator

from ..errors import InputError
from .ir import Graph

#: the scales every zoo model has (``parastream zoo``)
SCALES = ("tiny", "small", "7b")
#: the scale a zoo model is built at when none is given and no plan fixes one
DEFAULT_SCALE = "small"


def _need_torch(what: str) -> None:
    if importlib.util.find_spec("torch") is None:
        raise InputError(what, "importing a torch model needs torch "
                               "(pip install 'parastream[torch]')")


def resolve(spec: str, scale: str = "small", phase: str | None = None,
            device: str | None = None, batch: int | None = None, seq: int | None = None) -> Graph:
    """The operator graph of a zoo model (``"moe_layer"``) or a user factory
    (``"path/to/file.py:factory"``) at ``scale`` (tiny/small/7b) and ``phase``.

    ``phase`` picks the zoo model's shapes (``prefill``/``decode`` for transformer models;
    None = the model's first phase) and is passed to a user factory that accepts it.
    ``device`` names a device profile: it is checked and recorded in ``graph.meta["device"]``
    for the cost model; the graph itself (shapes, FLOPs, bytes) does not depend on it.
    ``batch`` / ``seq`` override a zoo model's batch size and sequence length (prefill: the
    prompt length; decode: the tokens already cached), for sweeps over shapes.
    """
    device_name = _check_device(device)
    from .torch_import import import_module

    # what the model's own code prints goes to stderr: stdout is the command's document
    # (a print() in forward made `graph --format json` invalid JSON)
    with contextlib.redirect_stdout(sys.stderr):
        module, inputs, name, meta = load_model(spec, scale, phase, batch, seq)
        with anchored(meta):
            graph = import_module(module, inputs, name=name, meta=meta)
    for note in graph.meta.get("notes", ()):  # how the import got round what it could not trace
        print(f"parastream: note: {spec}: {note}", file=sys.stderr)
    graph.meta.update({"scale": scale, "phase": phase or graph.meta.get("phase"),
                       "spec": spec})
    if batch is not None or seq is not None:
        graph.meta.update({"batch": batch, "seq": seq})
    if device_name:
        graph.meta["device"] = device_name
    return graph


def _check_device(device: str | None) -> str | None:
    if not device:
        return None
    try:
        from ..device.profile import load_profile
    except ImportError:  # the device layer is optional here: keep the name as given
        return device
    return load_profile(device).name


#: a file that is neither a graph JSON file nor a ``.py`` factory, given as a model
NOT_A_MODEL = "not a model: give a zoo name or path/to/file.py:factory"
FOLDER_NOT_MODEL = "a folder, not a model: give a zoo name or path/to/file.py:factory"


def is_zoo_name(spec: str) -> bool:
    """Whether ``spec`` is a built-in model's name: such a name means the zoo model even
    when a file or folder of that name is in the current directory (`run two_chains
    --trace two_chains` leaves one); ``./two_chains`` names the file. False without torch
    (the zoo cannot be imported)."""
    if os.sep in spec or "/" in spec or "." in spec or importlib.util.find_spec("torch") is None:
        return False
    from ..zoo import ZOO

    return spec in ZOO


def names_file(spec: str) -> bool:
    """Whether ``spec`` means a file: one exists there and it is not named like a zoo model
    (the zoo name goes first; ``./name`` for the file)."""
    return os.path.isfile(spec) and not is_zoo_name(spec)


def is_graph_file(spec: str) -> bool:
    """Whether ``spec`` names a graph JSON file the way :func:`load_graph` takes it: a
    file (:func:`names_file`) whose first non-blank byte is ``{``."""
    if not names_file(spec):
        return False
    try:
        with open(spec, "rb") as f:
            # leading blanks of any length, as load_graph's lstrip of the whole file
            while chunk := f.read(1 << 16):
                if head := chunk.lstrip():
                    return head[:1] == b"{"
            return False
    except OSError:
        return False


def _looks_like_file(spec: str) -> bool:
    path = spec.rpartition(":")[0] if ":" in spec else spec
    return path.endswith(".py") or os.sep in path or "/" in path


def model_source(spec: str) -> str:
    """``spec`` as a plan records it: a model file's path (``path/to/file.py:factory``, a
    graph JSON) made absolute, so that ``emit``, ``simulate`` and ``run --plan`` rebuild
    the model from any folder; a zoo name as it is."""
    if names_file(spec):
        return os.path.abspath(spec)
    if _looks_like_file(spec) and ":" in spec:
        path, _, attr = spec.rpartition(":")
        if os.path.isfile(path):
            return f"{os.path.abspath(path)}:{attr}"
    return spec


@contextlib.contextmanager
def anchored(meta: dict) -> Iterator[None]:
    """Errors from tracing a model that :func:`load_model` loaded from ``file.py:factory``
    name the file the user gave (and the factory), not the model's internal name."""
    try:
        yield
    except InputError as exc:
        if "file" not in meta:
            raise
        raise InputError(meta["file"], f"model from {meta['factory']}() {exc.reason}") from None


def load_model(spec: str, scale: str = "small", phase: str | None = None,
               batch: int | None = None, seq: int | None = None) -> tuple[Any, tuple, str, dict]:
    """The torch module and example inputs named by ``spec`` (a zoo name or
    ``path/to/file.py:factory``): ``(module, inputs, name, meta)``. One place for every
    command that needs the model itself (graph import, run, emit); InputError when it
    cannot be built."""
    if scale not in SCALES:
        raise InputError(None, f"unknown scale {scale!r} (expected one of {', '.join(SCALES)})")
    zoo_name = is_zoo_name(spec)  # a zoo name goes before a file or folder of that name
    if names_file(spec) and not spec.endswith(".py"):
        raise InputError(spec, NOT_A_MODEL)
    if spec.endswith((".json", ".json.gz")) and not os.path.exists(spec):
        raise InputError(spec, "no such file")  # a graph or plan file that is not there
    if os.path.isdir(spec) and not zoo_name:
        raise InputError(spec, FOLDER_NOT_MODEL)
    if _looks_like_file(spec):
        return _load_from_file(spec, scale, phase)
    _need_torch(spec)
    from ..zoo import ZOO, overrides

    model = ZOO.get(spec)
    if model is None:
        raise InputError(None, f"unknown model {spec!r} (built-in models: {', '.join(ZOO)}; "
                               "or give path/to/file.py:factory)")
    phase = phase or model.default_phase
    if phase not in model.phases:
        raise InputError(None, f"model {spec!r} has no phase {phase!r} "
                               f"(it has {', '.join(model.phases)})")
    try:
        with overrides(phase, batch=batch, seq=seq):
            module, inputs = model.factory(scale, phase)
    except (RuntimeError, MemoryError) as exc:  # torch's allocator at an absurd --batch/--seq
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(None, f"cannot build {spec!r} at these shapes (batch {batch}, seq "
                               f"{seq}): {first}") from None
    return module, tuple(inputs), spec, {"zoo": spec, "phase": phase,
                                         "description": model.description}


def _load_from_file(spec: str, scale: str, phase: str | None) -> tuple[Any, tuple, str, dict]:
    path, sep, attr = spec.rpartition(":")
    if not sep or not path:
        if spec.endswith((".json", ".json.gz")) and not os.path.exists(spec):
            raise InputError(spec, "no such file")  # a graph or plan file, not found
        raise InputError(spec, "name the factory after the file: path/to/file.py:factory")
    if not attr.isidentifier():
        raise InputError(path, f"{attr!r} is not a Python name; expected path/to/file.py:factory")
    if not os.path.isfile(path):
        raise InputError(path, "no such file" if not os.path.exists(path) else "not a file")
    _need_torch(path)
    mod = _load_file(path)
    factory = getattr(mod, attr, None)
    if factory is None:
        defined = sorted(n for n, v in vars(mod).items()
                         if callable(v) and not n.startswith("_")
                         and getattr(v, "__module__", None) == mod.__name__)
        raise InputError(path, f"no factory named {attr!r}"
                               + (f" (callables defined there: {', '.join(defined[:8])})"
                                  if defined else ""))
    if not callable(factory):
        raise InputError(path, f"{attr!r} is a {type(factory).__name__}, not a callable factory")
    result = _call_factory(factory, path, attr, scale, phase)
    module, inputs = _check_result(result, path, attr)
    name = os.path.splitext(os.path.basename(path))[0] + ":" + attr
    return module, tuple(inputs), name, {"file": path, "factory": attr}


def _load_file(path: str) -> Any:
    """Import a Python file as a fresh module (a unique name: nothing is cached or reused)."""
    name = f"_parastream_user_{uuid.uuid4().hex[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(path, "cannot be imported as a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses and pickling look modules up by name
    directory = os.path.dirname(os.path.abspath(path))
    added = directory not in sys.path
    if added:  # let the file import its siblings
        sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        where = f" on line {exc.lineno}" if exc.lineno else ""  # (none for a null byte)
        raise InputError(path, f"syntax error{where}: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # a sys.exit() at import is the file's, not ours
        sys.modules.pop(name, None)
        raise InputError(path, f"failed to import: {type(exc).__name__}: "
                               f"{(str(exc).strip().splitlines() or [''])[0]}") from None
    finally:
        if added:
            try:
                sys.path.remove(directory)
            except ValueError:
                pass
    return mod


def _call_factory(factory: Callable, path: str, attr: str, scale: str,
                  phase: str | None) -> Any:
    try:
        params = inspect.signature(factory).parameters
        known = True
    except (TypeError, ValueError):  # a builtin or C callable: its keywords are unknown
        params, known = {}, False
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict[str, Any] = {}
    if "scale" in params or var_kw:
        kwargs["scale"] = scale
    if phase is not None and ("phase" in params or var_kw):
        kwargs["phase"] = phase
    elif phase is not None and known:
        # it would be built at its own shapes and recorded under the phase asked for
        raise InputError(path, f"factory {attr}() takes no phase: drop --phase {phase}")
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                and n not in kwargs]
    if required:
        raise InputError(path, f"factory {attr}() needs arguments ({', '.join(required)}); "
                               "it must take none, or the keywords scale/phase")
    try:
        return factory(**kwargs)
    except (Exception, SystemExit) as exc:
        raise InputError(path, f"factory {attr}() failed: {type(exc).__name__}: "
                               f"{(str(exc).strip().splitlines() or [''])[0]}") from None


def _check_result(result: Any, path: str, attr: str) -> tuple[Any, tuple]:
    import torch

    if not (isinstance(result, tuple) and len(result) == 2):
        raise InputError(path, f"factory {attr}() must return (module, example_inputs), "
                               f"got {_describe(result)}")
    module, inputs = result
    if not isinstance(module, torch.nn.Module):
        raise InputError(path, f"factory {attr}() returned {_describe(module)} as the module; "
                               "expected a torch.nn.Module")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    if not isinstance(inputs, tuple):
        raise InputError(path, f"factory {attr}() returned {_describe(inputs)} as example "
                               "inputs; expected a tuple of tensors")
    return module, inputs


def _describe(v: Any) -> str:
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    return f"a {type(v).__name__}"


def load_graph(model: str, scale: str = "small", phase: str | None = None,
               device: str | None = None) -> Graph:
    """The operator graph a command was given: a graph JSON file (recognised by its
    content), else a zoo name or ``file.py:factory`` (:func:`resolve`). Bad input raises
    :class:`InputError` (one line)."""
    from .ir import SCHEMA, GraphError, loads

    if names_file(model):
        try:
            with open(model, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise InputError(model, f"cannot read: {exc.strerror or exc}") from None
        if data.lstrip()[:1] == b"{":
            import msgspec

            try:
                head = msgspec.json.decode(data, type=dict)
            except msgspec.DecodeError as exc:
                raise InputError(model, f"invalid JSON: {exc}") from None
            schema = head.get("schema")
            if schema == SCHEMA:
                try:
                    return loads(data)
                except GraphError as exc:
                    raise InputError(model, str(exc)) from None
            if schema == "parastream.graph-analysis/1":
                raise InputError(model, "this is a graph analysis document, not a graph "
                                        f"(expected \"schema\": \"{SCHEMA}\")")
            raise InputError(model, f"not a parastream graph: \"schema\" is {schema!r}, "
                                    f"expected {SCHEMA!r}")
        if not model.endswith(".py"):
            raise InputError(model, "not a graph JSON file (it does not start with '{') and "
                                    + NOT_A_MODEL)
    try:
        return resolve(model, scale=scale, phase=phase, device=device)
    except (InputError, KeyboardInterrupt):
        raise
    except GraphError as exc:
        raise InputError(model, str(exc)) from None
    except ModuleNotFoundError as exc:
        raise InputError(model, f"model import needs {exc.name}: pip install "
                                f"'parastream[torch]'") from None
    except (ValueError, KeyError, LookupError, OSError) as exc:
        raise InputError(model, str(exc).strip("'\"") or type(exc).__name__) from None
