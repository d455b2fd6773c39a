"""The docs describe the product as it is: a short README, no development history in the
prose, a CLI reference that covers every command and option, and no broken links."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "parastream"
CLI_MD = DOCS / "cli.md"

#: Wording that records who measured what, where and when, or cites documents the
#: repository does not ship. Case-insensitive patterns first, then case-sensitive ones.
HISTORY_ANY_CASE = [
    r"\bsessions?\b",
    r"\bdevelopment VM\b",
    r"\bthis VM\b",
    r"\bseed 00\d",
    r"\bDOMAIN\.md\b",
    r"\bDESIGN\.md\b",
]
HISTORY_EXACT_CASE = [
    # a run letter: "run C", "runs K and L", "run Z1" (not "--runs N", an option's metavar)
    r"(?<![-\w])[Rr]uns? [A-Z]\d?\b(?! ?[-=])",
]
#: A dated log entry in prose ("2026-11-29"); source files may still hold a date in data.
DATED = r"\b20\d\d-\d\d-\d\d\b"

HISTORY_RE = re.compile("|".join(HISTORY_ANY_CASE), re.IGNORECASE)
RUN_LETTER_RE = re.compile("|".join(HISTORY_EXACT_CASE))
DATED_RE = re.compile(DATED)


def _prose_files() -> list[Path]:
    """README.md, every Markdown page under docs/, and the package's .py and .md files."""
    files = [README, *sorted(DOCS.rglob("*.md"))]
    files += sorted(p for p in SRC.rglob("*") if p.suffix in (".py", ".md")
                    and "__pycache__" not in p.parts)
    return files


def _history_hits(path: Path) -> list[str]:
    """Each line of ``path`` that matches a development-history pattern, as 'file:line: text'."""
    hits = []
    is_doc = path.suffix == ".md"
    text = path.read_text(encoding="utf-8", errors="replace")
    for no, line in enumerate(text.splitlines(), 1):
        found = HISTORY_RE.search(line) or RUN_LETTER_RE.search(line)
        if not found and is_doc:
            found = DATED_RE.search(line)
        if found:
            hits.append(f"{path.relative_to(ROOT)}:{no}: {found.group(0)!r} in {line.strip()[:100]}")
    return hits


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines (at most 199)"


@pytest.mark.parametrize("line, hit", [
    ("measured in the seventh session", True),
    ("on the development VM a matmul took", True),
    ("on this VM it ran", True),
    ("see seed 003's table", True),
    ("as DOMAIN.md says", True),
    ("in run C, 21 of 40 rows", True),
    ("runs K and L", True),
    ("parastream run --runs N", False),
    ("parastream run FILE --auto", False),
    ("a run of 9 calls", False),
    ("--seed 0", False),
])
def test_history_patterns(line: str, hit: bool) -> None:
    """The patterns catch the wording they are for and leave ordinary prose alone."""
    assert bool(HISTORY_RE.search(line) or RUN_LETTER_RE.search(line)) is hit


def test_dated_pattern() -> None:
    assert DATED_RE.search("Final run (2026-11-29, load average ~2)")
    assert not DATED_RE.search("ProfilerStep#2026 took 11-29 us")


def test_no_development_history_in_prose() -> None:
    hits = [h for path in _prose_files() for h in _history_hits(path)]
    assert not hits, "development-history wording:\n" + "\n".join(hits)


def _helps() -> dict[str, str]:
    """``parastream --help`` ("") and ``parastream <command> --help`` for every command."""
    script = (
        "import contextlib, io, json, re, sys\n"
        "from parastream.cli import main\n"
        "def help_of(argv):\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            main(argv + ['--help'])\n"
        "        except SystemExit:\n"
        "            pass\n"
        "    return buf.getvalue()\n"
        "top = help_of([])\n"
        "cmds = re.search(r'\\{([a-z,_-]+)\\}', top).group(1).split(',')\n"
        "print(json.dumps({'': top, **{c: help_of([c]) for c in cmds}}))\n"
    )
    env = dict(os.environ, COLUMNS="100")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300, check=True)
    return json.loads(out.stdout)


def _sections(md: str) -> dict[str, str]:
    """The '## <command>' sections of docs/cli.md, by command."""
    parts = re.split(r"^## +`?([\w-]+)`?[^\n]*$", md, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


OPTION_LINE = re.compile(r"^\s{2,}(?:-\w(?: [A-Z_{][^,]*)?, )?(--[a-z][\w-]*)", re.MULTILINE)


def test_cli_reference_covers_every_command_and_option() -> None:
    helps = _helps()
    sections = _sections(CLI_MD.read_text(encoding="utf-8"))
    missing = []
    for cmd, text in helps.items():
        if not cmd:
            continue
        if cmd not in sections:
            missing.append(f"command {cmd}: no '## {cmd}' section")
            continue
        for opt in sorted(set(OPTION_LINE.findall(text))):
            if not re.search(re.escape(opt) + r"(?![\w-])", sections[cmd]):
                missing.append(f"{cmd} {opt}")
    assert len(helps) > 5, f"too few commands found in 'parastream --help': {sorted(helps)}"
    assert not missing, "docs/cli.md is missing:\n" + "\n".join(missing)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.MULTILINE | re.DOTALL)


def test_relative_links_point_to_files() -> None:
    broken, checked = [], 0
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        prose = CODE.sub("", page.read_text(encoding="utf-8"))  # code is not a link
        for target in LINK.findall(prose):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            path = target.split("#", 1)[0]
            checked += 1
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert checked > 10, f"only {checked} relative links found: is the link pattern right?"
    assert not broken, "broken relative links:\n" + "\n".join(broken)
