"""The arguments the ``parastream`` commands share, spelled and defaulted once.

Every command module builds its parser from these helpers, so one flag means one thing
everywhere: ``MODEL`` positional, ``--scale``, ``--phase``, ``--device`` (one default for
the commands that only model a device), ``-o/--output FILE`` for the primary output,
``--json FILE`` for a secondary JSON copy, ``--candidate NAME`` (a plan candidate by full
name or unique suffix). The glossary of the labels the commands print is here too, for
their ``--help`` epilogs (docs/glossary.md is its long form).

Pure argparse: importing this module imports neither torch nor the layers it describes.
"""

from __future__ import annotations

import argparse
import textwrap

from ..device.profile import DEFAULT_DEVICE

from ..graph.models import DEFAULT_SCALE, SCALES
#: the shipped device profiles, named in ``--device``'s help
SHIPPED = "ascend910, ascend910b, h100, h200, cpu"
_WIDTH = 88


def add_command(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
                glossary: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """Add subcommand ``name``: ``description`` wrapped, and the entries of the
    :data:`GLOSSARY` sections named in ``glossary`` as its ``--help`` epilog."""
    paras = [textwrap.fill(p, _WIDTH) for p in description.split("\n\n")]
    return sub.add_parser(name, help=help, description="\n\n".join(paras),
                          epilog=glossary_text(*glossary) if glossary else None,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def model_arg(p: argparse.ArgumentParser, *, metavar: str = "MODEL",
              help: str = "zoo name, path/to/file.py:factory, or a parastream.graph/1 JSON "
                          "file") -> None:
    """The positional model every model-taking command starts with."""
    p.add_argument("model", metavar=metavar, help=help)


def shape_args(p: argparse.ArgumentParser, *, default_scale: str | None = None,
               scale_note: str = "", phase_note: str = "the model's own") -> None:
    """``--scale`` and ``--phase`` of a zoo model. ``default_scale`` None leaves the value
    None when the flag is not given, so a command can tell "not given" (take a plan's)
    from an explicit scale; ``scale_note`` and ``phase_note`` say the default."""
    shown = scale_note or (default_scale or DEFAULT_SCALE)
    p.add_argument("--scale", metavar="S", default=default_scale,
                   help=f"zoo scale: {', '.join(SCALES)} (default {shown})")
    p.add_argument("--phase", metavar="P", help="zoo phase: prefill, decode or infer, as the "
                                                f"model has them (default: {phase_note})")


def device_arg(p: argparse.ArgumentParser, *, default: str | None = DEFAULT_DEVICE,
               note: str = "") -> None:
    """``--device`` naming a device profile (shipped name or .json path). The commands that
    only model a device (graph, plan, simulate) share :data:`DEFAULT_DEVICE` and say the
    device in their first output line; ``note`` says a default other than that."""
    said = note or f"default {default}"
    p.add_argument("--device", metavar="D", default=default,
                   help=f"device profile name or .json path ({said}; shipped: {SHIPPED})")


def output_arg(p: argparse.ArgumentParser, what: str, *, default: str | None = "stdout",
               hidden: tuple[str, ...] = ()) -> None:
    """``-o/--output FILE``: where the command's primary output goes (``default`` None: it
    is written only when asked for); ``hidden`` are old spellings still accepted but not
    shown (``plan --out``)."""
    said = f" (default {default})" if default else ""
    p.add_argument("-o", "--output", metavar="FILE", help=f"write {what} here{said}")
    for flag in hidden:
        p.add_argument(flag, dest="output", metavar="FILE", help=argparse.SUPPRESS)


def json_arg(p: argparse.ArgumentParser, what: str) -> None:
    """``--json FILE``: also write ``what`` as JSON (a secondary output)."""
    p.add_argument("--json", metavar="FILE", help=f"also write {what} as JSON to FILE")


def candidate_arg(p: argparse.ArgumentParser, *, what: str = "use",
                  default: str = "the plan's recommended one") -> None:
    """``--candidate NAME``: a candidate of a plan file by full name or unique suffix
    (:meth:`parastream.plan.io.PlanDoc.candidate` resolves it for every command)."""
    p.add_argument("--candidate", metavar="NAME",
                   help=f"the plan candidate to {what}: its full name or a unique suffix after "
                        f"'/' such as side-serial (default: {default}); an ambiguous suffix "
                        "is refused with the names it matches")


def format_arg(p: argparse.ArgumentParser, choices: tuple[str, ...]) -> None:
    """``--format`` of what goes to stdout (or ``-o``), text by default."""
    p.add_argument("--format", choices=choices, default="text",
                   help="output format (default text)")


#: the labels the commands print, by section: (label, meaning)
GLOSSARY: dict[str, tuple[tuple[str, str], ...]] = {
    "verdicts": (
        ("true / partial / false", "a parallel point's overlap verdict from overlap_pct "
         "(overlap of the side window and its dominator over the shorter of the two): true "
         ">= 0.5, false <= 0.05, partial in between"),
        ("envelope-only", "the side window spans its dominator (true or partial by "
         "overlap_pct) but the side ops' busy time overlapped main-stream work at most 0.05: "
         "counted with the false ones"),
        ("dominator", "the main-stream op a side window is meant to hide behind"),
    ),
    "triage": (
        ("3a", "triage against a single-stream baseline: the side stream never ran (every op "
         "on one stream)"),
        ("3b", "false parallelism: the work is split over streams but does not overlap "
         "(overlap_pct <= 0.05 or parallelism <= 1.05x); look for the barrier"),
        ("3c", "true overlap without a lower wall: core contention, long tails, an op over 5x "
         "its baseline, host-bound gaps or more tasks"),
    ),
    "graph": (
        ("serial", "two modules that must run in order (data dependency, shared writable "
         "state, collective order)"),
        ("parallel_candidate", "no data path between them; their results meet only at the "
         "join"),
        ("parallel_pending_validation", "independent, but a resource conflict or tiny shapes "
         "may eat the gain: measure it"),
        ("parallel point", "a fork whose branches have no path between them, and the join "
         "where they first meet ('end' when they never do)"),
    ),
    "candidates": (
        ("side-serial", "the dominating branch stays on stream 0; every other branch runs on "
         "one side stream, one after another; join at the join"),
        ("side-each", "every non-dominating branch on a side stream of its own"),
        ("early-join", "as side-serial, but stream 0 waits for the side stream right after "
         "issuing the side work: less overlap, shorter tensor lifetimes"),
        ("pinned", "as side-serial, with the cheap main-stream consumers of side outputs "
         "moved into the side block (no GE reorder exposure)"),
        ("dominant-on-side", "the dominating branch on the side stream, the rest on stream 0"),
        ("cross-stage", "a point across layers: the next layer's independent prologue (a "
         "prefetch, a KV-cache copy) beside the current layer"),
        ("matching / critical-path / resource-split", "whole-graph assignments: minimum chain "
         "cover; the longest path on stream 0; compute on stream 0, memory and communication "
         "on stream 1"),
        ("single", "everything on stream 0: the baseline every speedup is over"),
    ),
    "ladder": (
        ("C1", "strength ladder, first rung: streams split, whole streams synchronised (a "
         "wait covers everything the other stream was handed so far)"),
        ("C2", "C1 plus core limits (limit_core_num), only on devices whose APIs document "
         "them"),
        ("C3", "sync points placed by hand: a record right after the producer, the wait just "
         "before the first consumer"),
    ),
}


def glossary_text(*sections: str) -> str:
    """The ``--help`` epilog: the entries of ``sections`` of :data:`GLOSSARY`, one
    indented paragraph each."""
    lines = ["glossary (docs/glossary.md):"]
    for section in sections:
        for label, meaning in GLOSSARY[section]:
            lines.append(textwrap.fill(meaning, _WIDTH, initial_indent=f"  {label}: ",
                                       subsequent_indent="      "))
    return "\n".join(lines)


__all__ = ["DEFAULT_DEVICE", "DEFAULT_SCALE", "GLOSSARY", "SCALES", "add_command",
           "candidate_arg", "device_arg", "format_arg", "glossary_text", "json_arg",
           "model_arg", "output_arg", "shape_args"]
