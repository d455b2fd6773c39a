"""Profiler readers, chosen by the content of a file (never by its name).

Every reader module has ``FORMAT`` (its name in reports), ``sniff(head: bytes) -> bool``
(does the start of the decompressed file look like mine?) and
``read(path: str) -> Timeline``. :func:`read_path` sniffs and dispatches; a directory is
handed to :mod:`.directory`, which finds the best source inside it.
"""

from __future__ import annotations

import codecs
import gzip
import os
import zlib
from types import ModuleType
from typing import Iterator

from ...errors import InputError
from ..model import Timeline

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
HEAD_BYTES = 64 * 1024


#: byte order marks, longest first (a UTF-32-LE mark starts like a UTF-16-LE one)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
         (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
         (codecs.BOM_UTF16_BE, "utf-16-be"))


def text_encoding(head: bytes) -> tuple[str, int] | None:
    """The Unicode encoding of a text that is not plain UTF-8, as (codec, length of its
    byte order mark): told by the mark or, without one, by the zero bytes that UTF-16 and
    UTF-32 put beside an ASCII first character (as RFC 4627 detects JSON's encoding).
    None for UTF-8 without a mark, and for anything else."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    z = [b == 0 for b in head[:4]]
    if len(z) < 4:
        return None
    if z == [True, True, True, False]:
        return "utf-32-be", 0
    if z == [False, True, True, True]:
        return "utf-32-le", 0
    if z[:2] == [True, False]:
        return "utf-16-be", 0
    if z[:2] == [False, True] and z[2:] != [True, True]:
        return "utf-16-le", 0
    return None


def as_utf8_json(data: bytes, path: str = "", partial: bool = False) -> bytes:
    """JSON text in another Unicode encoding (UTF-16, UTF-32, UTF-8 with a byte order
    mark) re-encoded as plain UTF-8; anything else is returned unchanged, so that readers
    of other formats see their bytes as they are.

    ``partial``: ``data`` is a file's start, for sniffing: its last character may be cut
    and a character not valid in the encoding is replaced. Otherwise such a character
    raises InputError naming ``path``."""
    enc = text_encoding(data[:4])
    if enc is None:
        return data
    codec, skip = enc
    if codec == "utf-8":
        out = data[skip:]
    else:
        decoder = codecs.getincrementaldecoder(codec)("replace" if partial else "strict")
        try:
            text = decoder.decode(data[skip:], final=not partial)
        except UnicodeDecodeError as exc:
            raise InputError(path, f"not valid {codec.upper()} text at byte "
                                   f"{exc.start + skip}: {exc.reason}") from None
        out = text.encode("utf-8")
    return out if out.lstrip()[:1] in (b"{", b"[") else data


def read_head(path: str, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of a file, decompressed when it is gzip; JSON text in
    another Unicode encoding comes as UTF-8 (see :func:`as_utf8_json`)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
            if raw[:2] != GZIP_MAGIC:
                return as_utf8_json(raw, path, partial=True)
        with gzip.open(path, "rb") as g:
            return as_utf8_json(g.read(n), path, partial=True)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


def read_all(path: str) -> bytes:
    """The whole file, decompressed when it is gzip, JSON text in another Unicode
    encoding as UTF-8 (see :func:`as_utf8_json`); InputError when unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    return as_utf8_json(data, path)


def read_chunks(path: str, size: int) -> Iterator[bytes]:
    """The file's bytes, decompressed when it is gzip, in chunks of ``size`` bytes (the
    last may be shorter), so that a reader can work through a big file in bounded memory.
    JSON text in another Unicode encoding (UTF-16, UTF-32, a UTF-8 byte order mark) comes
    whole, as UTF-8, in one chunk (see :func:`read_all`). InputError when unreadable."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as src:
            chunk = src.read(size)
            if text_encoding(chunk[:4]) is not None:
                yield read_all(path)
                return
            while chunk:
                yield chunk
                chunk = src.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


def reader_modules() -> list[ModuleType]:
    """The file readers in the order they are tried."""
    from . import ascend_csv, ascend_db, kineto, trace_view

    return [ascend_db, kineto, trace_view, ascend_csv]


def sniff_format(path: str) -> ModuleType:
    """The reader module for ``path``; InputError when none recognises it."""
    return reader_for(read_head(path), path)


def reader_for(head: bytes, path: str) -> ModuleType:
    """The reader module whose ``sniff`` takes ``head`` (a file's decompressed start);
    InputError naming ``path`` when none does."""
    if not head.strip():
        raise InputError(path, "empty file")
    head = as_utf8_json(head, path, partial=True)  # a pipe's start comes as it is
    for mod in reader_modules():
        if mod.sniff(head):
            return mod
    raise InputError(path, "not a recognised profiler file (expected a Kineto/Chrome trace, "
                     "trace_view.json, kernel_details.csv, op_summary_*.csv or a profiler .db)")


def read_path(path: str | os.PathLike[str]) -> list[Timeline]:
    """Read a file or a profiler output directory into timelines (one per source file).

    Steps inside one file are not split here; see :meth:`Timeline.split_steps`.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        from . import directory

        return directory.read_dir(path)
    if not os.path.exists(path):
        raise InputError(path, "no such file or directory")
    if is_pipe(path):
        return [_read_spooled(path)]
    return [sniff_format(path).read(path)]


def is_pipe(path: str) -> bool:
    """A pipe (``<(zcat t.json.gz)``, ``cat t | ... /dev/stdin``): its bytes come once."""
    import stat

    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _read_spooled(path: str) -> Timeline:
    """A pipe read through a temporary file: the readers look at a file twice (sniff the
    head, then read), and a pipe gives its bytes once. Its start is sniffed before the
    rest is copied (``yes | analyze /dev/stdin`` is refused, not spooled to a full disk).
    Errors and the timeline name ``path``, not the temporary file."""
    import dataclasses
    import tempfile

    with tempfile.TemporaryDirectory(prefix="parastream-") as folder:
        tmp = os.path.join(folder, "input")
        try:
            src = open(path, "rb")
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        with src:
            first = _read_pipe(src, HEAD_BYTES, path)
            head = _pipe_head(first)
            mod = reader_for(head, path) if head is not None else None
            _spool(src, first, tmp, path)
        try:
            tl = (mod or sniff_format(tmp)).read(tmp)
        except InputError as exc:
            raise InputError(path if exc.path == tmp else exc.path,
                             exc.reason.replace(tmp, path)) from None
    return dataclasses.replace(tl, source=path,
                               warnings=[w.replace(tmp, path) for w in tl.warnings])


def _read_pipe(src, n: int, path: str) -> bytes:
    """Up to ``n`` bytes of the pipe (a buffered read waits for n bytes or the end)."""
    try:
        return src.read(n)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _pipe_head(first: bytes) -> bytes | None:
    """The decompressed start of a pipe's first bytes; None when a gzip start yields
    nothing (a cut or broken gzip: the file's own read then says why)."""
    if first[:2] != GZIP_MAGIC:
        return first
    try:
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(first, HEAD_BYTES)
    except zlib.error:
        return None
    return head or None


def _spool(src, first: bytes, tmp: str, path: str) -> None:
    """Copy the pipe, starting with the ``first`` bytes already read, into ``tmp``."""
    try:
        with open(tmp, "wb") as dst:
            chunk = first
            while chunk:
                dst.write(chunk)
                chunk = _read_pipe(src, 1 << 20, path)
    except OSError as exc:
        raise InputError(path, "cannot copy the pipe to a temporary file: "
                               f"{exc.strerror or exc}") from None
