"""Exact parsing of decimal microsecond timestamps into integer nanoseconds.

Profilers write epoch microseconds with nanosecond decimals (``1736413971558972.912``).
A float64 cannot hold them exactly, so text is split at the decimal point and both parts
are parsed as integers.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_DEC = re.compile(r"^\s*([+-]?)(\d*)(?:\.(\d*))?\s*$")


def us_text_to_ns(text: str) -> int:
    """``"1736413971558972.912\\t"`` -> ``1736413971558972912``; raises ValueError on junk.

    Digits past the third decimal (below a nanosecond) are rounded half up.
    """
    t = text.strip().strip('"').strip()
    m = _DEC.match(t)
    if not m or (not m.group(2) and not m.group(3)):
        # scientific notation and the like: fall back to float (only small values use it)
        v = float(t)
        if not math.isfinite(v):
            raise ValueError(f"not a finite time: {text!r}")
        return int(round(v * 1000))
    sign = -1 if m.group(1) == "-" else 1
    whole = int(m.group(2) or "0")
    frac = (m.group(3) or "")
    ns = int((frac + "000")[:3])
    if len(frac) > 3 and frac[3] >= "5":
        ns += 1
    return sign * (whole * 1000 + ns)


def trim_text(col: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A text column without the quotes, tabs and spaces profilers put around values."""
    if not pa.types.is_string(col.type):
        col = pc.cast(col, pa.string())
    return pc.utf8_trim(col, characters=' \t"\r\n')


def filled_numpy(arr, fill) -> np.ndarray:
    """An Arrow column as numpy, nulls replaced by ``fill``."""
    return pc.fill_null(arr, fill).to_numpy(zero_copy_only=False)


_POW10 = 10 ** np.arange(19, dtype=np.int64)
_I64_MAX = np.iinfo(np.int64).max


def _plain_us_to_ns(s: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Exact ns of trimmed plain decimal text; raises when any non-null value is not one.

    The text without its decimal point is one integer ``D`` with ``f`` decimals, so
    ``ns = D * 10**(3-f)``; with more than three decimals the fourth one rounds half up, as
    in :func:`us_text_to_ns`. Four Arrow kernels and some numpy, no Python per value.
    """
    dot = filled_numpy(pc.find_substring(s, "."), -1).astype(np.int64)
    length = filled_numpy(pc.binary_length(s), 0).astype(np.int64)
    digits = pc.cast(pc.replace_substring(s, ".", "", max_replacements=1), pa.int64())
    d = filled_numpy(digits, 0).astype(np.int64)
    neg = d < 0
    mag = np.abs(d)
    frac = np.where(dot >= 0, length - dot - 1, 0)
    if (frac > 18).any():
        raise ValueError("too many decimals")
    short = frac <= 3
    scale = _POW10[np.where(short, 3 - frac, 0)]
    if (mag[short] > _I64_MAX // scale[short]).any():
        raise ValueError("value out of range")
    ns = np.where(short, mag * scale, (mag // _POW10[np.maximum(frac - 4, 0)] + 5) // 10)
    return np.where(neg, -ns, ns)


def us_column_to_ns(col: pa.ChunkedArray | pa.Array, trim: bool = True
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Decimal microsecond text -> (int64 ns, ok mask); exact, bad rows tolerated.

    Quotes, tabs and spaces around values are ignored (``trim=False``: the caller knows
    there are none); NaN, inf, empty and junk values come back with ``ok`` false. Used by
    every reader with text or raw JSON timestamps.
    """
    s = trim_text(col) if trim else col
    present = np.asarray(filled_numpy(pc.is_valid(s), False), bool)
    try:
        return _plain_us_to_ns(s), present
    except (pa.ArrowInvalid, ValueError):
        pass
    # some rows are not plain numbers: parse the plain ones in bulk, the rest one by one
    plain = pc.fill_null(pc.match_substring_regex(s, r"^(-?\d+\.?\d*|\.\d+)$"), False)
    try:
        ns = _plain_us_to_ns(pc.if_else(plain, s, "0"))
        ok = np.asarray(filled_numpy(plain, False), bool).copy()
    except (pa.ArrowInvalid, ValueError):  # too large for int64, >18 decimals: row by row
        ns, ok = np.zeros(len(s), np.int64), np.zeros(len(s), bool)
    retry = np.flatnonzero(~ok & present)
    if len(retry):
        texts = s.take(pa.array(retry)).to_pylist()
        for i, t in zip(retry, texts):
            try:
                v = us_text_to_ns(t)
            except (ValueError, OverflowError):
                continue  # NaN, inf, junk
            if -(1 << 62) < v < (1 << 62):
                ns[i] = v
                ok[i] = True
    return ns, ok


def tokens_to_ns(tokens: list) -> tuple[np.ndarray, np.ndarray]:
    """:func:`us_column_to_ns` of raw JSON tokens (bytes-like: ``msgspec.Raw`` or bytes, a
    number or a quoted text each). The tokens are laid end to end into one Arrow string
    column, without a Python object per value."""
    n = len(tokens)
    lengths = np.fromiter(map(len, tokens), np.int64, n)
    data = b"".join(tokens)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    col = pa.Array.from_buffers(pa.large_string(), n,
                                [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    # a JSON number token has no quotes or spaces around it to trim; text has quotes
    return us_column_to_ns(col, trim=b'"' in data)
