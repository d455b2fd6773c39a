"""Write a whole output file or nothing: a failed run never leaves a half-written report."""

from __future__ import annotations

import os
import tempfile


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
    ``path`` is left as it was (absent, or the previous version).
    """
    path = os.fspath(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    directory = os.path.dirname(os.path.abspath(path))
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
