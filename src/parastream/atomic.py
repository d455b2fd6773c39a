"""Write a whole output file or nothing: a failed run never leaves a half-written report."""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile

from .errors import InputError


def _default_mode() -> int:
    """The mode ``open()`` would give a new file (0o666 minus the umask).

    Linux exposes the umask in /proc without changing it; elsewhere it is read by setting
    and restoring it (briefly process-wide, hence the /proc route first).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` to ``path`` atomically.

    The bytes go to a temporary file in the same directory (so the final rename never
    crosses a file system), are flushed to disk, and the file is then renamed over
    ``path`` with :func:`os.replace`. On any error the temporary file is removed and
    ``path`` is left as it was (absent, or the previous version). An OS error (no such
    directory, a directory in the way, no permission, a full disk) is raised as an
    :class:`~parastream.errors.InputError` naming ``path``. An existing character
    device or FIFO (``-o /dev/stdout``, ``/dev/null``, a named pipe) is written in place
    instead: it holds no file to keep, and a rename would replace the node itself.
    """
    path = os.fspath(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    kind = output_kind(path)
    if kind == "file":
        # through a symlink to its file: renaming over the link itself would turn it into
        # a plain file and leave the file it pointed to as it was
        target = os.path.realpath(path) if os.path.islink(path) else path
        try:
            _write(target, payload, os.path.dirname(os.path.abspath(target)))
        except OSError as exc:
            raise InputError(path, f"cannot write: {exc.strerror or exc}") from None
        return
    _refuse_special(path, kind)
    # what was printed before comes first (Python buffers it; this write does not)
    for out in (sys.stdout, sys.stderr):
        try:
            out.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        if kind == "fd":
            # this process's own descriptor (-o /dev/stdout): written where it stands, a
            # file it was redirected to (>> log) included, never replaced
            view = memoryview(payload)
            while view:
                view = view[os.write(own_fd(path), view):]
        else:
            # a terminal, /dev/null, a named pipe: nothing there to lose, and renaming a
            # file over it would replace the node itself (-o /dev/null as root)
            with open(path, "wb") as f:
                f.write(payload)
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from None


_FD_PATH = re.compile(r"/dev/(?:std(out|err)|fd/(\d+))|/proc/(self|\d+)/fd/(\d+)")


def own_fd(path: str | os.PathLike[str]) -> int | None:
    """The descriptor of this process that ``path`` names (``/dev/stdout``,
    ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``), else None: such an output is
    written to the descriptor, wherever the shell pointed it (a pipe, a terminal, a file
    appended to)."""
    m = _FD_PATH.fullmatch(os.fspath(path))
    if m is None:
        return None
    std, fd, proc, proc_fd = m.groups()
    if std:
        return 1 if std == "out" else 2
    if fd is not None:
        return int(fd)
    return int(proc_fd) if proc == "self" or int(proc) == os.getpid() else None


def output_kind(path: str | os.PathLike[str]) -> str:
    """How an output at ``path`` is written: ``fd`` (one of this process's descriptors,
    :func:`own_fd`), ``stream`` (an existing character device or FIFO: written in place,
    as a shell redirection writes it), ``special`` (a block device or socket: refused),
    else ``file`` (a file or nothing yet: replaced atomically)."""
    if own_fd(path) is not None:
        return "fd"
    try:
        mode = os.stat(path).st_mode  # through symlinks
    except (OSError, ValueError):
        return "file"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream"
    return "special" if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode) else "file"


def is_stream_output(path: str | os.PathLike[str]) -> bool:
    """An output written in place rather than replaced (:func:`output_kind` ``fd`` or
    ``stream``)."""
    return output_kind(path) in ("fd", "stream")


def _refuse_special(path: str, kind: str) -> None:
    if kind == "special":
        raise InputError(path, "cannot write: a block device or socket, not a file")


def _write(path: str, payload: bytes, directory: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_writable(path: str | os.PathLike[str] | None,
                   made: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`~parastream.errors.InputError` unless a file can be written at
    ``path`` (its directory exists and is writable, and no directory is in its place):
    commands call it for every output before they measure or write anything, so a typo in
    the last output's path neither wastes a run nor leaves the other outputs behind.
    ``None`` (no such output) passes. ``made``: an output folder the command makes before
    it writes ``path`` (checked with :func:`check_folder`); a file right in it passes
    whether or not the folder is there yet."""
    if not path:  # no such output (an empty name is stdout too)
        return
    path = os.fspath(path)
    kind = output_kind(path)
    _refuse_special(path, kind)
    if kind == "fd":  # written to the descriptor (write_atomic)
        fd = own_fd(path)
        try:
            os.fstat(fd)
        except OSError:
            raise InputError(path, f"cannot write: descriptor {fd} is not open") from None
        return
    if kind == "stream":  # written in place (write_atomic)
        if not os.access(path, os.W_OK):
            raise InputError(path, "cannot write: not writable")
        return
    if os.path.islink(path):  # write_atomic writes through it: check where it points
        path = os.path.realpath(path)
    if os.path.isdir(path):
        raise InputError(path, "cannot write: it is a directory, not a file")
    if path.endswith(os.sep):
        raise InputError(path, "cannot write: a folder's name (it ends with a slash), "
                               "not a file's")
    directory = os.path.dirname(os.path.abspath(path))
    if made and directory == os.path.abspath(made):
        return
    if not os.path.isdir(directory):
        there = _nearest_existing(directory)
        raise InputError(path, f"cannot write: {there} is a file, not a folder"
                         if not os.path.isdir(there) else f"cannot write: no directory {directory}")
    _probe_write(directory, path, "directory")


def _nearest_existing(path: str) -> str:
    """``path`` or the nearest of its parents that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def _probe_write(directory: str, name: str, what: str) -> None:
    """Make and remove a temporary file in ``directory``: permission bits say nothing to
    root, nor of a read-only mount or /proc, where only a write tells."""
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(name, f"cannot write: {what} {directory} is not writable")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".parastream-probe-")
    except OSError as exc:
        raise InputError(name, f"cannot write in {directory}: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:
        pass


def check_outputs(outputs: dict[str, str | os.PathLike[str] | None],
                  inputs: list[str | os.PathLike[str] | None] | tuple = ()) -> None:
    """:func:`check_writable` for every output (flag -> path), and refuse two outputs of
    one path (one would overwrite the other) or an output that is one of the ``inputs``
    (a trace analysed and then overwritten by its own report is lost)."""
    seen: dict[str, str] = {}
    for flag, path in outputs.items():
        if not path:
            continue
        check_writable(path)
        check_not_input(flag, path, inputs)
        if is_stream_output(path):
            continue  # two on one stream are no lost file (-o /dev/null --html /dev/null)
        key = _key(path)
        if key in seen:
            raise InputError(path, f"{seen[key]} and {flag} name the same file")
        seen[key] = flag


def check_not_input(flag: str, path: str | os.PathLike[str] | None,
                    inputs: list[str | os.PathLike[str] | None] | tuple) -> None:
    """Refuse an output ``path`` that is one of the command's ``inputs`` (a stream output,
    :func:`is_stream_output`, overwrites no file)."""
    if path and not is_stream_output(path) and _key(path) in {_key(p) for p in inputs if p}:
        raise InputError(path, f"cannot write {flag}: it is an input of this command, "
                               "which it would overwrite")


def spec_paths(*specs: str | None) -> list[str]:
    """The files a command's input arguments may name, for :func:`check_outputs`: each
    argument, and the file part of a ``path/to/file.py:factory`` model."""
    out: list[str] = []
    for s in specs:
        if s:
            out.append(s)
            if ":" in s:
                out.append(s.rsplit(":", 1)[0])
    return out


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (symlinks and relative parts resolved)."""
    return _key(a) == _key(b)


def _key(path: str | os.PathLike[str]) -> str:
    """One spelling per file: symlinks and relative parts resolved."""
    return os.path.realpath(os.fspath(path))


def check_folder(path: str | os.PathLike[str] | None) -> None:
    """Like :func:`check_writable` for an output folder (``--trace DIR``, ``--out DIR``):
    a file must not be in its place, and the nearest part of it that exists must be a
    writable directory (the folders below it are made)."""
    if not path:
        return
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(path, "cannot write: it is a file, not a folder")
    probe = _nearest_existing(path)
    if not os.path.isdir(probe):
        raise InputError(path, f"cannot write: {probe} is not a folder")
    _probe_write(probe, path, "folder")


def make_folder(path: str | os.PathLike[str]) -> None:
    """``os.makedirs(path, exist_ok=True)``, an OS error raised as an
    :class:`~parastream.errors.InputError` naming ``path``."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from None


def gzipped_if_named(path: str | os.PathLike[str], payload: bytes) -> bytes:
    """``payload`` gzip-compressed when ``path`` ends in ``.gz``, as the name promises: for
    traces, which every trace reader here takes gzipped."""
    if os.fspath(path).endswith(".gz"):
        import gzip

        return gzip.compress(payload, mtime=0)
    return payload
