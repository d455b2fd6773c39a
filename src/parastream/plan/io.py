"""The plan document (``parastream.plan/1``): candidates for one model on one device."""

from __future__ import annotations

from collections import Counter

import msgspec

from ..errors import InputError
from ..graph.ir import is_whole
from .model import SCHEMA, Plan


class PlanDoc(msgspec.Struct):
    """A plan file: the ``candidates`` for ``model`` on ``device``, best first, the one
    ``recommended``, the parallel points they split, and how to rebuild the model."""

    model: str
    device: str
    recommended: str
    candidates: list[Plan]
    parallel_points: list[dict] = []
    #: how to rebuild the graph: {"model": spec, "scale": ..., "phase": ...}
    source: dict = {}
    schema: str = SCHEMA

    def candidate(self, name: str) -> Plan:
        """The candidate called ``name``, or the only one whose name ends in ``/name``
        (``side-serial`` for ``<point>/side-serial``); :class:`NoCandidate` (a KeyError)
        otherwise, whose ``reason`` is the one line every command says: the matches when
        the suffix is ambiguous, else the candidates there are."""
        for c in self.candidates:
            if c.name == name:
                return c
        suffix = [c for c in self.candidates if c.name.endswith("/" + name)]
        if len(suffix) == 1:
            return suffix[0]
        if suffix:
            raise NoCandidate(name, f"--candidate {name!r} is ambiguous: {len(suffix)} "
                                    f"candidates end in it ({', '.join(c.name for c in suffix)})")
        names = ", ".join(c.name for c in self.candidates[:12])
        more = f", ... ({len(self.candidates)} in all)" if len(self.candidates) > 12 else ""
        raise NoCandidate(name, f"no candidate named {name!r} (candidates: {names}{more})")


class NoCandidate(KeyError):
    """No single candidate answers to a name; ``reason`` says why in one line."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name)
        self.reason = reason


def with_recommendation(doc: PlanDoc, name: str) -> PlanDoc:
    """``doc`` recommending candidate ``name`` instead (a measured decision over the
    simulator's pick); unchanged when it has no candidate of that name."""
    if name == doc.recommended or not any(c.name == name for c in doc.candidates):
        return doc
    return msgspec.structs.replace(doc, recommended=name)


def to_builtins(doc: PlanDoc) -> dict:
    """``doc`` as plain builtins, its ``schema`` first (what a plan file holds)."""
    body = msgspec.to_builtins(doc)
    body.pop("schema", None)
    return {"schema": SCHEMA, **body}


def dumps(doc: PlanDoc) -> bytes:
    """The plan file's bytes: :func:`to_builtins` as indented JSON."""
    return msgspec.json.format(msgspec.json.encode(to_builtins(doc)), indent=1)


def plan_shaped(raw: dict) -> bool:
    """Whether :func:`loads` takes the decoded JSON object ``raw`` for a plan: its schema is
    the plan's, or it names none and holds candidates (a plan document) or an assignment
    (one bare candidate)."""
    if "schema" in raw:
        return raw["schema"] == SCHEMA
    return "candidates" in raw or "assignment" in raw


def loads(data: bytes | str) -> PlanDoc:
    """Parse a plan document; a bare single plan object is accepted too. ValueError with the
    reason when it is neither."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None
    if isinstance(raw, dict) and "candidates" not in raw and "assignment" in raw:
        raw = {"model": raw.get("meta", {}).get("model", "?"), "device": "?",
               "recommended": raw.get("name", "plan"), "candidates": [raw]}
    try:
        doc = msgspec.convert(raw, PlanDoc)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a parastream plan: {exc}") from None
    if doc.schema != SCHEMA:
        raise ValueError(f"unsupported schema {doc.schema!r} (this parastream reads {SCHEMA})")
    twice = sorted(n for n, k in Counter(c.name for c in doc.candidates).items() if k > 1)
    if twice:  # --candidate NAME and the recommendation pick candidates by name
        raise ValueError(f"candidate name(s) used twice: {', '.join(map(repr, twice))}")
    for c in doc.candidates:
        bad = _bad_stream(c) or _bad_core_limit(c)
        if bad:
            raise ValueError(f"candidate {c.name!r}: {bad}")
    return doc


#: stream ids a plan may use: labels, but a C long in the simulator and the executors
MAX_STREAM_ID = 2 ** 31 - 1


def _bad_stream(plan: Plan) -> str | None:
    """An op assigned to a stream id outside 0..:data:`MAX_STREAM_ID`, or None (2**63
    crashed the simulator with an OverflowError)."""
    for op, s in plan.assignment.items():
        if not 0 <= s <= MAX_STREAM_ID:
            return f"op {op!r} is on stream {s}: stream ids run from 0 to {MAX_STREAM_ID}"
    return None


def _bad_core_limit(plan: Plan) -> str | None:
    """What is wrong with a candidate's ``core_limits`` (``{"<stream>": {"aicore_num": n,
    "vectorcore_num": m, "reason": ...}}``, n a whole number of cores >= 1, m >= 0: 0 is
    what torchair takes on the 910, which has no separate vector cores), or None.
    A hand-edited -4 reached the simulator as a ValueError and ``emit`` wrote
    ``limit_core_num(-4, -8)``."""
    for key, spec in (plan.core_limits or {}).items():
        if not (key.isascii() and key.isdigit()):
            return f"core_limits key {key!r} is no stream number"
        if not isinstance(spec, dict) or "aicore_num" not in spec:
            return (f"core_limits[{key!r}] must be an object with aicore_num "
                    f"(and optionally vectorcore_num), not {spec!r}")
        for field, least in (("aicore_num", 1), ("vectorcore_num", 0)):
            v = spec.get(field)
            if (field == "aicore_num" or v is not None) and not (is_whole(v) and v >= least):
                return (f"core_limits[{key!r}].{field} must be a whole number of cores >= "
                        f"{least}, not {v!r}")
    return None


def require_fit(graph, plan: Plan, where: str, model: str = "this model") -> None:
    """Refuse (an :class:`InputError` naming ``where``, the plan file or model) a plan
    whose events do not order every cross-stream dependency of ``graph``, or that names
    ops it does not have (:func:`parastream.plan.hb.check`): what ``run``, ``emit`` and
    ``simulate`` ask of a plan before they use it."""
    from .hb import check
    from .model import PlanError

    try:
        check(graph, plan)
    except PlanError as exc:
        raise InputError(where, f"candidate {plan.name!r} does not fit {model}: {exc}") from None


def load_doc(path: str, candidate: str | None = None) -> tuple[PlanDoc, Plan]:
    """Read a plan file: the document and the chosen candidate (default: the recommended
    one). Every problem is an InputError naming the file."""
    try:
        with open(path, "rb") as f:
            doc = loads(f.read())
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(path, str(exc)) from None
    return doc, pick(doc, candidate, path)


def pick(doc: PlanDoc, candidate: str | None, where: str) -> Plan:
    """The candidate ``--candidate`` names (default: the recommended one), by
    :meth:`PlanDoc.candidate`; an InputError naming ``where`` (the plan file) otherwise."""
    try:
        return doc.candidate(candidate or doc.recommended)
    except NoCandidate as exc:
        raise InputError(where, exc.reason) from None


def plan_shapes(doc: PlanDoc, where: str, scale: str | None = None,
                phase: str | None = None) -> tuple[str, str | None]:
    """The scale and phase to build a plan's model at: the plan's own (``doc.source``),
    which a ``--scale``/``--phase`` given beside the plan must equal (the op names are the
    same at every scale, so a plan made at one runs silently at another). An InputError
    naming ``where`` (the plan file) and the mismatch otherwise; what the plan does not
    record is taken from the flags (default scale small)."""
    from ..graph.models import DEFAULT_SCALE

    src = doc.source or {}
    bad = [f"--{flag} {given} but the plan was made at {flag} {made}"
           for flag, given, made in (("scale", scale, src.get("scale")),
                                     ("phase", phase, src.get("phase")))
           if given is not None and made is not None and given != made]
    if bad:
        raise InputError(where, "; ".join(bad) + ": drop the flag, or make a plan at these "
                                "shapes with 'parastream plan'")
    return scale or src.get("scale") or DEFAULT_SCALE, phase or src.get("phase")
