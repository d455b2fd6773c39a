"""Keep, change candidate, or stay single-stream: the decision from measured runs.

Rules: a candidate whose measured median wall does not beat the single-stream median by
``margin`` (default 5%) is never recommended; on a CPU each side is also measured in a
process of its own in its best OpenMP setting (:mod:`parastream.cpu.baseline`), and the
faster figure of each side counts. The single-stream side is the fastest single-stream
median of the whole invocation (every candidate's rounds measure the same single-stream
model): on a busy machine an OpenMP team stalls on a descheduled thread and one
candidate's rounds can measure single stream hundreds of times slower than another's. A
speedup above :data:`PLAUSIBLE_PER_STREAM` times the plan's stream count is no overlap
any plan gives, but a disturbed baseline: never recommended. Among those left, the fastest measured
one wins; the current candidate (the plan file's recommendation, or the simulator's pick)
is kept when it is within ``margin`` of the winner. A win measured while other tasks took
half the cores for at least :data:`BUSY_REFUSE` of the measurement (on the cpu backend,
sampled for 2 s or more: ``run_candidates``' ``busy_share``) is not recommended: on a
small machine a busy neighbour can stall the single-stream model's OpenMP team several
times over while the one-thread streams run on, a speedup no plan gives. Every decision comes with the numbers: medians, speedup, predicted wall,
overlap verdicts and the triage verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

#: multi-stream must be this much faster than single-stream to be recommended
from ..plan.model import SPEEDUP_MARGIN as MARGIN

#: the most a plan can plausibly measure over single stream, per stream it uses: k streams
#: overlap at most k ways, and the single stream's best setting (all intra-op threads on
#: one stream) loses at most about as much again to thread-team overhead on tiny ops
PLAUSIBLE_PER_STREAM = 2.0
#: single-stream medians of one invocation further apart than this: the machine was disturbed
BASELINE_SPREAD = 1.5
#: the share of the measurement other tasks may hold half the cores before a win is withheld
BUSY_REFUSE = 0.5
#: the fewest busy-watch samples (0.2 s apart) a withheld win needs
BUSY_MIN_SAMPLES = 10


def busy_evidence(share: float, samples: int, device: str) -> float:
    """The busy share :func:`recommend` weighs: ``share`` on a backend whose streams are
    host threads (``Capabilities.host_threads``) sampled at least :data:`BUSY_MIN_SAMPLES`
    times, else 0. Only host threads' OpenMP teams stall under a busy neighbour, and a few
    samples are no evidence (on 2 cores one runnable task is already half of them, so a
    quiet machine reads busy now and then)."""
    return share if _host_threads(device) and samples >= BUSY_MIN_SAMPLES else 0.0


def _host_threads(device: str) -> bool:
    """Whether backend ``device`` runs its streams on host threads (False for a name no
    backend is registered under)."""
    from .backend import backend_capabilities

    try:
        return backend_capabilities(device).host_threads
    except ValueError:
        return False


@dataclass
class CandidateResult:
    """One measured candidate."""

    name: str
    speedup: float                     # single median / multi median
    single_median_us: float
    multi_median_us: float
    predicted_wall_us: float | None = None
    predicted_single_us: float | None = None
    #: simulated with this model's measured single-stream op times instead of the profile's
    predicted_from_ops_us: float | None = None
    overlap_pcts: list[float] = field(default_factory=list)
    #: per point, the share of its side ops' busy time the main stream covered
    busy_overlap_pcts: list[float] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    triage: str | None = None
    outputs_ok: bool | None = None
    #: cpu, each in a process of its own (cpu.baseline): the plain module with OpenMP
    #: threads spinning, this candidate with them sleeping
    iso_single_us: float | None = None
    iso_multi_us: float | None = None
    #: lower and upper quartile of the side-by-side rounds' own speedups
    #: (:attr:`parastream.runtime.measure.Measurement.speedup_quartiles`)
    speedup_quartiles: tuple[float, float] | None = None
    #: the streams the plan runs on (None: not known, no plausibility limit)
    streams: int | None = None
    #: the fastest single-stream median of the whole invocation, any candidate's rounds or
    #: the separate process (set by :func:`recommend`)
    floor_single_us: float | None = None

    @property
    def own_single_us(self) -> float:
        """This candidate's faster single-stream figure: side by side or in its own process."""
        return min(x for x in (self.single_median_us, self.iso_single_us) if x is not None)

    @property
    def best_single_us(self) -> float:
        """The fastest single-stream figure: this candidate's, or another candidate's
        rounds' in the same invocation."""
        return min(x for x in (self.own_single_us, self.floor_single_us) if x is not None)

    @property
    def plausible_limit(self) -> float:
        """The largest speedup the plan's streams can give (:data:`PLAUSIBLE_PER_STREAM`
        per stream; unlimited when the count is not known)."""
        return float("inf") if self.streams is None else PLAUSIBLE_PER_STREAM * max(1, self.streams)

    @property
    def plausible(self) -> bool:
        """Whether the speedup each side's best figure gives is within
        :attr:`plausible_limit`; a larger one means a disturbed baseline."""
        return self.best_speedup <= self.plausible_limit

    @property
    def best_multi_us(self) -> float:
        """The faster multi-stream figure: side by side or in its own process."""
        return min(x for x in (self.multi_median_us, self.iso_multi_us) if x is not None)

    @property
    def predicted_speedup(self) -> float | None:
        """The simulated single-stream wall over the simulated multi-stream wall."""
        if not self.predicted_wall_us or self.predicted_single_us is None:
            return None
        return self.predicted_single_us / self.predicted_wall_us

    @property
    def best_speedup(self) -> float:
        """Each side in its best setting (what a recommendation uses)."""
        return self.best_single_us / self.best_multi_us if self.best_multi_us else 0.0


@dataclass
class Recommendation:
    action: str                        # "keep" | "change" | "single"
    candidate: str | None              # the recommended candidate (None = single stream)
    summary: str
    evidence: list[str]
    #: the usable candidate closest to winning (each side in its best setting): the
    #: recommended one, else the best under the margin (None when none ran correctly)
    closest: str | None = None

    def to_dict(self) -> dict:
        return {"action": self.action, "candidate": self.candidate, "summary": self.summary,
                "evidence": list(self.evidence)}


def _line(r: CandidateResult) -> str:
    pred = (f", predicted {r.predicted_wall_us:,.0f} us" if r.predicted_wall_us is not None
            else "")
    def fracs(xs: list[float]) -> str:
        return ", ".join(f"{p:.2f}" for p in xs[:4]) or "-"

    ovl = f"overlap_pct [{fracs(r.overlap_pcts)}]" + (
        f" busy overlap [{fracs(r.busy_overlap_pcts)}]" if r.busy_overlap_pcts else "")
    tri = f", triage {r.triage}" if r.triage else ""
    ok = "" if r.outputs_ok is None else (", outputs identical" if r.outputs_ok
                                          else ", OUTPUTS DIFFER")
    iso = ""
    if r.iso_single_us is not None or r.iso_multi_us is not None:
        def us(x: float | None) -> str:
            return f"{x:,.0f} us" if x is not None else "-"

        iso = (f"; in separate processes multi {us(r.iso_multi_us)} (OpenMP threads sleeping) "
               f"vs single {us(r.iso_single_us)} (spinning); best of each "
               f"{r.best_speedup:.2f}x")
    if r.floor_single_us is not None and r.floor_single_us < r.own_single_us:
        iso += (f"; against this run's fastest single stream ({r.floor_single_us:,.0f} us) "
                f"{r.best_speedup:.2f}x")
    rounds = (f" (rounds {r.speedup_quartiles[0]:.2f}-{r.speedup_quartiles[1]:.2f}x)"
              if r.speedup_quartiles else "")
    return (f"{r.name}: multi {r.multi_median_us:,.0f} us vs single {r.single_median_us:,.0f} us "
            f"= {r.speedup:.2f}x{rounds}{iso}{pred}; {ovl}{tri}{ok}")


def _noisy(r: CandidateResult, margin: float) -> str:
    """A caution when the spread of the recommended candidate's side-by-side rounds, put
    around the speedup that decided (each side's best figure), reaches under the margin:
    the median may be luck on a noisy machine."""
    if not r.speedup_quartiles or r.speedup <= 0:
        return ""
    below = r.speedup_quartiles[0] / r.speedup  # relative to the side-by-side speedup
    low = below * r.best_speedup
    if low >= 1.0 + margin:
        return ""
    return (f"; noisy: a quarter of its side-by-side rounds measured "
            f"{r.speedup_quartiles[0]:.2f}x or less, {1 - below:.0%} under its side-by-side "
            f"speedup, which would put it at {low:.2f}x; confirm with more --runs")


def recommend(results: list[CandidateResult], current: str | None = None,
              margin: float = MARGIN, notes: Sequence[str | None] = (),
              busy_share: float = 0.0, device: str = "cpu") -> Recommendation:
    """Decide from measured candidates (see the module docstring); ``notes`` (a busy
    machine during the measurement) close the evidence; ``busy_share``: the share of the
    measurement other tasks took half the cores (a win is withheld at
    :data:`BUSY_REFUSE` or more); ``device``: where the plans ran (the likely causes of
    a disturbed baseline differ: OpenMP teams are the CPU's)."""
    floor = min((r.own_single_us for r in results), default=None)
    for r in results:  # every candidate's speedup is taken against the run's fastest
        r.floor_single_us = floor
    evidence = [_line(r) for r in results]
    # the spread is the side-by-side rounds' (the separate process's one figure is shared)
    rounds = [r.single_median_us for r in results if r.single_median_us]
    if floor and rounds and max(rounds) > BASELINE_SPREAD * floor:
        why = ("another process, or an OpenMP thread team stalled on a descheduled thread"
               if _host_threads(device) else "another process on the host, or the host's own noise")
        evidence.append(f"the single-stream model measured {floor:,.0f} to {max(rounds):,.0f} us "
                        f"in this run: the machine was disturbed ({why}); every candidate "
                        f"is compared with the fastest, {floor:,.0f} us")
    bad = [r.name for r in results if r.outputs_ok is False]
    if bad:
        evidence.append(f"excluded (outputs differ from single stream): {', '.join(bad)}")
    odd = [r for r in results if r.outputs_ok is not False and not r.plausible]
    for r in odd:
        evidence.append(f"excluded (implausible): {r.name} measured {r.best_speedup:.2f}x on "
                        f"{r.streams} stream(s), more than the {r.plausible_limit:g}x "
                        "its streams can give: the single-stream baseline was disturbed; "
                        "measure again on a quiet machine")
    evidence += [n for n in notes if n]  # (a quiet run's note is None)
    usable = [r for r in results if r.outputs_ok is not False and r.plausible]
    winners = [r for r in usable if r.best_speedup >= 1.0 + margin]
    if not winners:
        best = max(usable, key=lambda r: r.best_speedup, default=None)
        parts = []
        if bad:
            parts.append(f"{len(bad)} candidate(s) gave outputs unlike the single-stream "
                         "model's")
        if odd:
            parts.append(f"{len(odd)} measured an implausible speedup (a disturbed "
                         "single-stream baseline: measure again on a quiet machine)")
        why = (f"the best candidate {best.name} measured {best.best_speedup:.2f}x, below the "
               f"{1 + margin:.2f}x margin" if best
               else "; ".join(parts) if parts
               else "there is no multi-stream candidate to run (no parallel point the "
                    "planner can use)")
        return Recommendation("single", None, f"stay single-stream: {why}", evidence,
                              best.name if best else None)
    best = max(winners, key=lambda r: r.best_speedup)
    if busy_share >= BUSY_REFUSE:
        return Recommendation(
            "single", None, f"stay single-stream until measured on a quiet machine: "
            f"{best.name} measured {best.best_speedup:.2f}x while other tasks took half the "
            f"cores during {busy_share:.0%} of the measurement (a stalled single-stream "
            "thread team can fake a win)", evidence, best.name)
    cur = next((r for r in winners if r.name == current), None)
    if cur is not None and cur.best_speedup >= best.best_speedup * (1.0 - margin):
        return Recommendation("keep", cur.name, f"keep {cur.name}: {cur.best_speedup:.2f}x measured"
                              + (f" (best {best.name} {best.best_speedup:.2f}x is within the margin)"
                                 if best is not cur else "") + _noisy(cur, margin),
                              evidence, cur.name)
    was = f" instead of {current}" if current else ""
    return Recommendation("change", best.name, f"use {best.name}{was}: {best.best_speedup:.2f}x "
                          "measured" + _noisy(best, margin), evidence, best.name)


__all__ = ["BASELINE_SPREAD", "BUSY_MIN_SAMPLES", "BUSY_REFUSE", "MARGIN", "PLAUSIBLE_PER_STREAM", "CandidateResult", "Recommendation", "busy_evidence", "recommend"]
