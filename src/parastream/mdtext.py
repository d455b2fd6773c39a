"""Names from models and traces inside Markdown: op, module and file names are the user's,
and a ``<script>`` or a backtick in one must neither inject into a rendered page nor break
the document around it. Imports nothing of parastream, so every layer may use it."""

from __future__ import annotations

import re
from typing import Any


#: characters Markdown or inline HTML give a meaning anywhere in a line: escaped with a
#: backslash (CommonMark shows the character itself), not as HTML entities, so the
#: Markdown source stays readable and ``<`` shows as ``<`` in every renderer
_MARKUP = re.compile(r"([\\`*<>&\[\]~])")
#: a run of underscores: inside a word (``hcom_allReduce__123``) it cannot open or close
#: emphasis, at a word's edge it can
_UNDERSCORES = re.compile(r"_+")


def text(value: Any) -> str:
    """Prose: on one line, the characters Markdown or HTML give a meaning
    backslash-escaped (no HTML entities), so the rendered text is the value itself."""
    s = str(value).replace("\r", " ").replace("\n", " ")
    return _UNDERSCORES.sub(_underscores, _MARKUP.sub(r"\\\1", s))


def _underscores(m: re.Match[str]) -> str:
    s, a, b = m.string, m.start(), m.end()
    inside = 0 < a and b < len(s) and _alnum(s[a - 1]) and _alnum(s[b])
    return m.group() if inside else "\\_" * (b - a)


def _alnum(ch: str) -> bool:
    return ch.isalnum()


def cell(value: Any) -> str:
    """A table cell: :func:`text` with the column separator escaped."""
    return text(value).replace("|", "\\|")


def code(value: Any, table: bool = False) -> str:
    """An inline code span that holds any text: the fence is one backtick longer than the
    longest run of backticks inside, padded where the text starts or ends with one. HTML
    in a code span is shown, not run. In a table cell (``table``) the pipe is escaped too
    (tables split rows at it before they read code spans)."""
    s = str(value).replace("\r", " ").replace("\n", " ")
    if table:
        s = s.replace("|", "\\|")
    runs = re.findall(r"`+", s)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def mermaid_label(value: Any, limit: int | None = None) -> str:
    """A name as the text of a quoted Mermaid node label inside a ```` ```mermaid ````
    fence: on one line (a newline in a name could close the fence and turn the rest of
    the document into raw HTML), cut to ``limit`` characters before escaping, and the
    characters Mermaid or HTML read escaped with Mermaid's ``#code;`` entities."""
    s = " ".join(str(value).split())
    if limit is not None:
        s = s[:limit]
    return (s.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;")
            .replace(">", "#gt;").replace("`", "#96;"))
