"""Readable op and kernel names for reports.

A CUDA kernel's name is its demangled C++ signature: the return type, the namespaces, the
template arguments (often nested, often hundreds of characters) and the parameter list.
The report needs the function and enough of its arguments to tell two kernels apart, the
way Holistic Trace Analysis shortens names for its tables: :func:`short_name` collapses
long template arguments to ``<…>``, drops the parameter list and the return type, and
bounds what is left with an ellipsis in the middle. Names that are not C++ signatures
(Ascend ``aclnnCast_Cast``, ``hcom_allReduce__123_0_1``, ``Memcpy HtoD (Pageable ->
Device)``) come back unchanged unless they are longer than the bound.

Pure functions of strings: no parastream import, so every renderer may use them.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
#: the longest name :func:`short_name` returns by default
DEFAULT_LIMIT = 60
#: the shortest bound accepted: room for a head, the ellipsis and a tail
MIN_LIMIT = 8
#: template arguments or parenthesised text up to this many characters, with no brackets
#: inside, stay: ``<float, float>`` tells two kernels apart, ``<…>`` would not
_KEEP_INNER = 32
#: symbols that follow ``operator`` and are part of the function's name, not brackets
_OPERATOR = re.compile(r"operator\s*(\(\)|\[\]|<=>|<<=|>>=|->\*|->|<<|>>|<=|>=|<|>)")
#: qualifiers that may follow a parameter list
_QUALIFIERS = re.compile(r"(\s*(const|volatile|noexcept|&&|&))*$")
_ANONYMOUS = "(anonymous namespace)::"
_CALLER = re.compile(r"[\w>)\]]")
_NAME_START = re.compile(r"[\w:~]")


def short_name(name: str, limit: int = DEFAULT_LIMIT) -> str:
    """``name`` shortened for a report: never longer than ``name`` or than ``limit``
    characters (``limit`` at least :data:`MIN_LIMIT`), never empty when ``name`` is not,
    on one line, and the same when shortened again (idempotent). When ``name``'s ``<>``
    and ``()`` pair up, so do the result's."""
    limit = max(int(limit), MIN_LIMIT)
    if not name.strip():  # blanks: kept as spaces, on one line
        return re.sub(r"\s", " ", name[:limit])
    s = name
    for _ in range(8):  # each step only shortens; a few reach the fixed point
        nxt = _step(s, limit)
        if nxt == s:
            break
        s = nxt
    return s


def display_name(name: str, mode: str = "short", limit: int = DEFAULT_LIMIT) -> str:
    """``name`` as a report shows it: :func:`short_name` for ``mode`` "short", the whole
    name on one line for "full"."""
    if mode == "full":
        return " ".join(name.split()) if name.strip() else name
    return short_name(name, limit)


def _step(s: str, limit: int) -> str:
    s = " ".join(s.split()).replace(_ANONYMOUS, "")
    s = _collapse(s, 0, len(s), _pairs(s))
    s = _drop_signature(s)
    return _bound(s, limit) if len(s) > limit else s


def _literal_spans(s: str) -> set[int]:
    """Positions of bracket characters that are no brackets: ``->`` and the symbols of
    an ``operator<``, ``operator()`` and the like."""
    lit = {m.start() + 1 for m in re.finditer("->", s)}
    for m in _OPERATOR.finditer(s):
        lit.update(range(m.start(1), m.end(1)))
    return lit


def _pairs(s: str) -> dict[int, int]:
    """Matching bracket positions, opener -> closer, for ``<>`` and ``()``. A ``<`` after
    a space is a comparison, a ``>`` with a ``(`` open or nothing open is literal, and a
    ``)`` closes its ``(`` even across ``<`` left open (those were comparisons). The
    template arguments of an operator may follow a space: ``operator< <int>``."""
    lit = _literal_spans(s)
    stack: list[int] = []
    out: dict[int, int] = {}
    for i, ch in enumerate(s):
        if i in lit:
            continue
        if ch == "(" or (ch == "<" and i > 0 and (not s[i - 1].isspace() or i - 2 in lit)):
            stack.append(i)
        elif ch == ">" and stack and s[stack[-1]] == "<":
            out[stack.pop()] = i
        elif ch == ")":
            _close_paren(s, i, stack, out)
    return out


def _close_paren(s: str, i: int, stack: list[int], out: dict[int, int]) -> None:
    """Pair the ``)`` at ``i`` with the innermost open ``(`` (in ``out``), dropping it and
    the ``<`` left open after it from ``stack``; a ``)`` with no ``(`` open is literal."""
    opens = [k for k, j in enumerate(stack) if s[j] == "("]
    if opens:
        out[stack[opens[-1]]] = i
        del stack[opens[-1]:]


def _collapse(s: str, lo: int, hi: int, pairs: dict[int, int]) -> str:
    """``s[lo:hi]`` with each outermost pair shortened: a parameter list (``(`` right after
    a name) to ``(…)``, long or nested template arguments or parenthesised text to
    ``<…>`` or ``(…)``; a pair that stays has its inside collapsed the same way."""
    out: list[str] = []
    i = lo
    while i < hi:
        j = pairs.get(i)
        if j is None or j >= hi:
            out.append(s[i])
            i += 1
            continue
        inner = s[i + 1:j]
        nested = any(lo2 in pairs for lo2 in range(i + 1, j))
        call = s[i] == "(" and i > 0 and _CALLER.match(s[i - 1]) is not None
        if inner and (call or nested or len(inner) > _KEEP_INNER):
            out.append(s[i] + ELLIPSIS + s[j])
        else:
            out.append(s[i] + _collapse(s, i + 1, j, pairs) + s[j])
        i = j + 1
    return "".join(out)


def _drop_signature(s: str) -> str:
    """Without its trailing parameter lists (and ``const`` and the like after them) and,
    when it had one, without the return type before the name."""
    dropped = False
    while True:
        q = _QUALIFIERS.search(s)
        body = s[:q.start()] if q else s
        if not body.endswith(")"):
            break
        pairs = _pairs(body)
        opener = next((o for o, c in pairs.items() if c == len(body) - 1), None)
        if opener is None or opener == 0 or _CALLER.match(body[opener - 1]) is None:
            break
        s = body[:opener]
        dropped = True
    if not dropped:
        return s
    pairs = _pairs(s)
    # the name starts after the last space outside brackets that a name follows
    starts = [i + 1 for i, ch in enumerate(s[:-1]) if ch == " " and _NAME_START.match(s[i + 1])
              and not _inside(i, pairs)]
    return s[starts[-1]:] if starts else s


def _inside(i: int, pairs: dict[int, int]) -> bool:
    return any(o < i < c for o, c in pairs.items())


def _bound(s: str, limit: int) -> str:
    """``s`` cut to ``limit`` characters with an ellipsis in the middle: a third for the
    head (namespaces), the rest for the tail (the function's own name), cut where no
    bracket pair is open. When the pairs leave no good place, every outermost pair is
    collapsed first (then each is three characters)."""
    head_budget = (limit - 1) // 3
    tail_budget = limit - 1 - head_budget
    cut = _cut(s, head_budget, tail_budget)
    if len(cut) >= limit // 2:
        return cut
    forced = _collapse_all(s)
    return forced if len(forced) <= limit else _cut(forced, head_budget, tail_budget)


def _cut(s: str, head_budget: int, tail_budget: int) -> str:
    free = _free_cuts(s)  # 0 and len(s) are always free
    head = max(c for c in free if c <= head_budget)
    tail = max(head, min(c for c in free if c >= len(s) - tail_budget))
    return s[:head] + ELLIPSIS + s[tail:]


def _collapse_all(s: str) -> str:
    pairs = _pairs(s)
    out, i = [], 0
    while i < len(s):
        j = pairs.get(i)
        if j is None:
            out.append(s[i])
            i += 1
        else:
            out.append(s[i] + (ELLIPSIS if j > i + 1 else "") + s[j])
            i = j + 1
    return "".join(out)


def _free_cuts(s: str) -> list[int]:
    """Positions between characters that no bracket pair spans."""
    pairs = _pairs(s)
    covered = [0] * (len(s) + 2)
    for o, c in pairs.items():
        covered[o + 1] += 1
        covered[c + 1] -= 1
    cuts, depth = [], 0
    for pos in range(len(s) + 1):
        depth += covered[pos]
        if depth == 0:
            cuts.append(pos)
    return cuts
