"""The fair scheduler every decode mode shares: FCFS with aging, a KV budget in blocks,
preemption by recompute.

Each scheduling *pass* decides one step: which running jobs decode a token and which
waiting jobs are admitted (their prefill gives their first token). Invariants:

- **FCFS with aging**: waiting jobs are considered in queue order (arrival order, ``seq``);
  a job that does not fit may be passed over by a later one that does, but a job passed
  over ``max_skip`` times blocks every job behind it until it is admitted: no job is
  skipped more than ``max_skip`` passes.
- **KV budget**: the blocks held by running jobs never exceed ``kv_blocks``; a job holds
  ``blocks_for(prompt + generated)`` blocks for the step it is in (block ids from one free
  list: no block is held twice).
- **Preemption by recompute**: when the running jobs' next tokens do not fit, the job that
  wastes least (fewest positions to recompute; the latest in the queue among equals) is
  preempted: its blocks are freed and it goes back to the waiting queue at its own place
  (its ``seq``), to be prefilled again over its prompt and the tokens it has.
- **Nothing lost**: every job added ends exactly once, finished or failed with a reason
  (:attr:`Scheduler.ended`); a job that cannot fit the whole budget fails, it never waits
  forever.
- **Chunked prefill** (``prefill_chunk`` set): an admitted job's prefill is computed in
  chunks: each pass hands out at most ``prefill_chunk`` prefill positions, to the
  prefilling jobs in queue order and then to the jobs it admits, and the step runs them
  beside the running jobs' decode rows (a step's tokens: decode rows + one chunk). A
  prefilling job holds the blocks of the positions its chunks have reached (they grow
  chunk by chunk, within the budget like any growth) and gives its first token with its
  last chunk; preempted, it starts its prefill again from position 0.

Pure Python, no torch: the property tests drive it without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import blocks_for

WAITING, RUNNING, FINISHED, FAILED = "waiting", "running", "finished", "failed"


@dataclass(frozen=True)
class SchedulerSettings:
    """``max_running`` jobs at once (the concurrency; 1 = sequential), ``kv_blocks`` the
    KV budget in blocks, ``max_skip`` the most passes a waiting job may be passed over,
    ``context`` the most positions one job may hold (the model's context),
    ``prefill_chunk`` the most prefill positions of one pass (None: each prefill whole,
    on its own)."""

    max_running: int = 16
    kv_blocks: int = 1024
    max_skip: int = 4
    context: int = 1 << 30
    prefill_chunk: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_running", "kv_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_skip < 0:
            raise ValueError("max_skip must not be negative")
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise ValueError("prefill_chunk must be at least 1")


@dataclass(eq=False)
class Job:
    """The scheduler's view of one request: sizes, progress and accounting."""

    rid: int
    seq: int
    prompt: int
    output: int
    generated: int = 0
    state: str = WAITING
    table: list[int] = field(default_factory=list)
    skips: int = 0
    passes_waited: int = 0
    preemptions: int = 0
    reason: str = ""
    #: chunked prefill: the positions the prefill fills (0: not prefilling in chunks),
    #: those its chunks have computed, and where this pass's chunk ends
    target: int = 0
    filled: int = 0
    stop: int = 0

    @property
    def positions(self) -> int:
        """Positions the job's cache holds once its prefill is done and its next token
        counted (prompt + tokens so far)."""
        return self.prompt + self.generated

    @property
    def prefilling(self) -> bool:
        """Running with a chunked prefill not finished yet."""
        return self.target > 0

    @property
    def step_positions(self) -> int:
        """Positions the job's cache holds after this pass's step (its chunk's end while
        prefilling in chunks)."""
        return self.stop if self.prefilling else self.positions

    @property
    def done(self) -> bool:
        return self.generated >= self.output


@dataclass(frozen=True)
class Chunk:
    """A chunk of ``job``'s prefill in this pass: positions ``start .. stop-1``; the last
    chunk (``final``) gives the job's first token."""

    job: Job
    start: int
    stop: int
    final: bool


@dataclass
class Pass:
    """One pass's decisions: jobs prefilled whole (admitted; each gives its first token),
    chunks of prefills, jobs decoding one token, jobs preempted and jobs failed."""

    prefill: list[Job] = field(default_factory=list)
    decode: list[Job] = field(default_factory=list)
    preempted: list[Job] = field(default_factory=list)
    failed: list[Job] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def jobs(self) -> list[Job]:
        """The jobs of this step (prefills first, then chunks, then decode rows)."""
        return self.prefill + [c.job for c in self.chunks] + self.decode

    def __bool__(self) -> bool:
        return bool(self.prefill or self.chunks or self.decode)


class Scheduler:
    """FCFS with aging over a KV budget (see the module docstring)."""

    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.free: list[int] = list(range(settings.kv_blocks - 1, -1, -1))
        self.waiting: list[Job] = []
        self.running: list[Job] = []
        self.ended: list[Job] = []
        self.passes = 0
        self._budget = 0  # prefill positions left in this pass (chunked prefill)

    # ------------------------------------------------------------------ entry
    def add(self, job: Job) -> None:
        """Queue ``job`` (arrived now). One with no output to give finishes at once; one
        that can never run (a prompt over the context, more blocks than the budget) fails
        at once."""
        if job.output <= 0:
            self._end(job, FINISHED, "zero output tokens asked")
        elif job.prompt >= self.settings.context:
            self._end(job, FAILED, f"a prompt of {job.prompt} tokens does not fit the "
                                   f"context of {self.settings.context}")
        elif self._need(job) > self.settings.kv_blocks:
            self._end(job, FAILED, self._too_big(job))
        else:
            self._enqueue(job)

    def schedule(self) -> Pass:
        """Decide the next step: grow the running jobs (preempting when the budget is
        short), then admit waiting jobs in queue order."""
        self.passes += 1
        p = Pass()
        self._grow_running(p)  # which hands out this pass's prefill budget first
        if not p.preempted:  # memory is tight: nobody new this pass
            self._admit(p)
        p.chunks = [Chunk(j, j.filled, j.stop, j.stop == j.target)
                    for j in self.running if j.prefilling and j.stop > j.filled]
        p.decode = [j for j in self.running if j not in p.prefill and not j.prefilling]
        for j in self.waiting:
            j.passes_waited += 1
        return p

    def advance(self, step: Pass) -> list[Job]:
        """Count one token for every job of ``step`` that gives one (not a chunk before
        the last); those done, or whose context is full, finish (their blocks freed).
        Returns the finished jobs."""
        done = []
        for c in step.chunks:
            if c.job.state == RUNNING:
                c.job.filled = c.stop
                if c.final:
                    c.job.target = 0
        for j in step.prefill + [c.job for c in step.chunks if c.final] + step.decode:
            if j.state != RUNNING:
                continue
            j.generated += 1
            if j.done or j.positions >= self.settings.context:
                self._end(j, FINISHED, "done" if j.done else
                          f"context full at {j.positions} positions")
                done.append(j)
        return done

    def fail(self, job: Job, reason: str) -> None:
        """End ``job`` as failed (its blocks freed); nothing for a job already ended."""
        if job.state in (WAITING, RUNNING):
            self._end(job, FAILED, reason)

    @property
    def held(self) -> int:
        """Blocks held by running jobs."""
        return self.settings.kv_blocks - len(self.free)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # ------------------------------------------------------------------ steps
    def _need(self, job: Job) -> int:
        """Blocks of the job's whole history (prompt and tokens so far)."""
        return blocks_for(max(1, job.positions))

    def _step_need(self, job: Job) -> int:
        """Blocks the job's step in this pass takes (a chunked prefill's, as far as this
        pass's chunk reaches)."""
        return blocks_for(max(1, job.step_positions))

    def _allot(self) -> None:
        """Hand this pass's prefill positions to the prefilling running jobs, in queue
        order: each chunk ends at ``stop``."""
        budget = self.settings.prefill_chunk or 0
        for j in self.running:
            if j.prefilling:
                j.stop = min(j.target, j.filled + budget)
                budget -= j.stop - j.filled
        self._budget = budget

    def _too_big(self, job: Job) -> str:
        return (f"needs {self._need(job)} KV blocks for its {job.positions} positions, "
                f"the budget is {self.settings.kv_blocks}")

    def _grow_running(self, p: Pass) -> None:
        """Give each running job the blocks of its next step, preempting the least-waste
        jobs while the budget is short; a job alone that cannot grow fails."""
        while True:
            self._allot()
            short = sum(self._step_need(j) - len(j.table) for j in self.running)
            if short - len(self.free) <= 0:
                break
            if len(self.running) == 1:
                p.failed.append(self.running[0])
                self._end(self.running[0], FAILED, self._too_big(self.running[0]))
                return
            victim = min(self.running, key=lambda j: (_waste(j), -j.seq))
            self._preempt(victim)
            p.preempted.append(victim)
        for j in self.running:
            self._take(j, self._step_need(j) - len(j.table))

    def _admit(self, p: Pass) -> None:
        """Admit waiting jobs in queue order while slots and blocks last; count a skip
        for each job passed over; a job at ``max_skip`` blocks all behind it."""
        slots = self.settings.max_running - len(self.running)
        passed: list[Job] = []
        for j in list(self.waiting):
            if slots <= 0 or (self.settings.prefill_chunk and self._budget <= 0):
                break
            if self._need(j) > self.settings.kv_blocks:  # grew past it before a preemption
                p.failed.append(j)
                self._end(j, FAILED, self._too_big(j))
            elif self._first_need(j) <= len(self.free):
                self.waiting.remove(j)
                self._start(j, p)
                slots -= 1
                for q in passed:  # a later job went first
                    q.skips += 1
                passed = []
            elif j.skips >= self.settings.max_skip:
                break
            else:
                passed.append(j)
        self.running.sort(key=lambda j: j.seq)

    def _first_need(self, job: Job) -> int:
        """Blocks a waiting job takes when admitted now: its whole history, or with
        chunked prefill its first chunk's."""
        if not self.settings.prefill_chunk:
            return self._need(job)
        return blocks_for(min(job.positions, self._budget))

    def _start(self, job: Job, p: Pass) -> None:
        """Admit ``job``: whole prefill, or its first chunk out of this pass's budget."""
        job.state = RUNNING
        self.running.append(job)
        if self.settings.prefill_chunk:
            job.target, job.filled = job.positions, 0
            job.stop = min(job.target, self._budget)
            self._budget -= job.stop
        else:
            p.prefill.append(job)
        self._take(job, self._step_need(job))

    def _preempt(self, job: Job) -> None:
        self._release(job)
        self.running.remove(job)
        job.preemptions += 1
        job.target = job.filled = job.stop = 0
        self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        """Into the waiting queue at its own place (``seq`` order)."""
        job.state = WAITING
        k = len(self.waiting)
        while k and self.waiting[k - 1].seq > job.seq:
            k -= 1
        self.waiting.insert(k, job)

    def _take(self, job: Job, n: int) -> None:
        for _ in range(max(0, n)):
            job.table.append(self.free.pop())

    def _release(self, job: Job) -> None:
        self.free.extend(reversed(job.table))
        job.table = []

    def _end(self, job: Job, state: str, reason: str) -> None:
        self._release(job)
        job.target = job.filled = job.stop = 0
        if job in self.running:
            self.running.remove(job)
        if job in self.waiting:
            self.waiting.remove(job)
        job.state, job.reason = state, reason
        self.ended.append(job)


def _waste(job: Job) -> int:
    """Positions a preemption of ``job`` throws away (to be computed again)."""
    return job.filled if job.prefilling else job.positions


__all__ = ["Chunk", "FAILED", "FINISHED", "Job", "Pass", "RUNNING", "Scheduler", "SchedulerSettings",
           "WAITING"]
