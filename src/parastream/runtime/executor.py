"""Run a torch model on the streams a plan names: an ``torch.fx.Interpreter`` subclass.

How a call runs (a ``torch.fx.Interpreter`` that overrides ``run_node``: switch stream, wait, run, record):

* The module is traced once (:func:`parastream.graph.torch_import.import_runnable`): the
  operator graph the plan was made for and the runnable FX graph come from the same trace,
  so plan op names are FX node names.
* The host thread walks the op nodes in program order. ``run_node`` of an op waits on the
  events the plan puts before it (``wait_before``), hands the op to its stream, and records
  the events the plan puts after it (``record_after``). The plan's events are the contract:
  none are derived here (the validator, :func:`parastream.plan.hb.check`, proved them
  sufficient). After the last op, stream 0 waits on the plan's end-join events.
* Folded views (and asserts / size queries) are not ops of the plan: they run lazily, on
  the thread of the first op that reads them (its stream's worker, or the calling thread
  for stream 0; readers on two streams at once may both compute one, without harm), after
  that op's waits, so a view of a side-stream tensor is never taken before it exists.
  A view not yet read when an in-place op changes its base's layout (``v = h[0];
  h.t_()``) is taken by that op instead, before it runs (the graph op's
  ``meta["views_before"]``), as eager mode takes it.
* host backends (cpu; ``Capabilities.host_threads``): each plan stream is a persistent
  worker thread with a FIFO; torch's intra-op thread count is set once from the main
  thread before the workers start (torch's worker threads keep the count they first
  saw). The streams are held while the call is issued; then the other streams' workers
  get their programs and stream 0's runs on the calling thread itself, with the stream's
  thread count: no hand-off and no sleep for it, and its threaded ops use this thread's
  own OpenMP team (on a worker they wake a second team through the kernel).
  Device backends (cuda/npu): the same walk launches kernels
  under ``torch.cuda.stream`` / ``torch.npu.stream``; tensors read on another stream than
  the one that made them are ``record_stream``-ed, and the caller's current stream is
  joined at the start and at the end.
* ``enable=False`` runs the original module untouched (the enable switch).
* Jitter (:class:`Jitter`) adds random per-op delays and a random issue interleaving of
  the streams (keeping each stream's FIFO order and every record before its waits): a
  missing synchronisation then shows up as a value read before it was produced
  (:class:`MissingSyncError`) or as outputs that differ from the single-stream run.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
from torch.fx.node import map_arg

from ..graph.records import written_args
from ..graph.torch_import import no_mha_fastpath, random_draws
from ..plan.io import PlanDoc
from ..plan.model import Plan
from ..timeline.model import Timeline
from .backend import (Backend, Capabilities, ModelCallError, StreamError, backend_capabilities,
                      capabilities_of, get_backend)

_MISSING = object()


class MissingSyncError(RuntimeError):
    """An op read a value that was not produced yet: a missing event between streams."""


@dataclass
class Jitter:
    """Random per-op delays and stream interleavings to flush missing synchronisation.

    ``prob``: chance that an op sleeps first; ``max_delay_us``: the longest sleep (uniform);
    ``shuffle_issue``: issue ops in a random interleaving of the streams instead of program
    order (each stream's order and record-before-wait are kept). Reproducible by ``seed``.
    """

    seed: int = 0
    prob: float = 0.5
    max_delay_us: float = 200.0
    shuffle_issue: bool = True


@dataclass
class Comparison:
    """Outputs of the multi-stream run against the single-stream run."""

    ok: bool
    exact: bool
    max_abs_diff: float = 0.0
    mismatched: list[str] = field(default_factory=list)
    error: str | None = None

    def __bool__(self) -> bool:
        return self.ok

    def describe(self) -> str:
        if self.error:
            return f"failed: {self.error}"
        how = "bitwise" if self.exact else "within tolerance"
        if self.ok:
            return f"outputs identical ({how})"
        # shape or dtype mismatches ("output 0: (4,) ... vs ...") compared no values
        values = any(":" not in m for m in self.mismatched)
        return (f"outputs differ ({how}): {', '.join(self.mismatched[:5])}"
                + (f"; max |diff| {self.max_abs_diff:.3g}" if values else ""))


def compare(expected: Any, actual: Any, *, exact: bool = True, rtol: float = 1e-4,
            atol: float = 1e-5) -> Comparison:
    """Compare two output structures leaf by leaf: bitwise (``exact``) or ``allclose``."""
    import torch.utils._pytree as pytree

    e_leaves, e_spec = pytree.tree_flatten(expected)
    a_leaves, a_spec = pytree.tree_flatten(actual)
    if e_spec != a_spec:
        return Comparison(False, exact, error=f"output structure differs: {e_spec} vs {a_spec}")
    bad: list[str] = []
    worst = 0.0
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        if isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor):
            if e.shape != a.shape or e.dtype != a.dtype:
                bad.append(f"output {i}: {tuple(a.shape)} {a.dtype} vs {tuple(e.shape)} {e.dtype}")
                continue
            a_c, e_c = a.detach().cpu(), e.detach().cpu()
            same = torch.equal(a_c, e_c) if exact else torch.allclose(
                a_c.double(), e_c.double(), rtol=rtol, atol=atol, equal_nan=True)
            if exact and not same and torch.equal(torch.isnan(a_c), torch.isnan(e_c)):
                same = torch.equal(torch.nan_to_num(a_c), torch.nan_to_num(e_c))
            if not same:
                bad.append(f"output {i}")
                if a_c.numel() and a_c.is_floating_point():
                    worst = max(worst, float((a_c.double() - e_c.double()).abs().nan_to_num().max()))
        elif e != a:
            bad.append(f"output {i}: {a!r} vs {e!r}")
    return Comparison(not bad, exact, worst, bad)


def default_threads(streams: int, cores: int | None = None) -> int:
    """Intra-op threads per stream so that streams x threads <= cores (C2-like core limit)."""
    cores = cores or _cores()
    return max(1, cores // max(1, streams))


def _cores() -> int:
    """CPUs this process may run on (:func:`parastream.runtime.host.cpu_count`)."""
    from .host import cpu_count

    return cpu_count()


def _plan_of(plan: Plan | PlanDoc, candidate: str | None = None) -> Plan:
    if isinstance(plan, PlanDoc):
        return plan.candidate(candidate or plan.recommended)
    return plan


@dataclass(frozen=True)
class ExecutorOptions:
    """How a :class:`MultiStreamExecutor` runs (every field optional).

    ``enable``: off runs the original module untouched. ``jitter``: random delays and
    issue orders (:class:`Jitter`). ``intra_op_threads`` (host backends): torch threads of
    each stream worker; default ``cores // streams``. ``validate``: check the plan with
    the happens-before validator first (turn off only to test that jitter catches a
    broken plan). ``name``: the traced program's name when the executor traces it.
    ``garbage_collect_values``: free each intermediate once its last reader has run, as
    eager mode does (off: keep all of them until the call returns). ``pin`` (host
    backends): give each stream's worker (and the intra-op threads it starts) its own
    cores when the streams' threads fit in the cores this process may use
    (:func:`stream_cpus`); stream 0's, which is the calling thread, only while it runs the
    stream's program; off: the OS places them. Default: on when the environment sets
    ``PARASTREAM_PIN_STREAMS=1`` (``parastream run --pin``), so processes it starts
    measure the same way."""

    enable: bool = True
    jitter: Jitter | None = None
    intra_op_threads: int | None = None
    validate: bool = True
    name: str = "model"
    garbage_collect_values: bool = True
    pin: bool | None = None


class MultiStreamExecutor(torch.fx.Interpreter):
    """Runs ``module`` with every op on its planned stream (see the module docstring).

    ``plan``: a :class:`Plan` (or a :class:`PlanDoc`: its recommended candidate).
    ``backend``: ``"cpu"``, ``"cuda"``, ``"npu"``, ``"null"`` or a backend instance.
    ``runnable``: a pre-traced :class:`~parastream.graph.torch_import.Runnable`.
    ``options`` (:class:`ExecutorOptions`), with any of its fields given as keyword
    ``overrides`` on top (``intra_op_threads=1``, ``jitter=Jitter(seed=3)``).
    """

    def __init__(self, module: torch.nn.Module, example_inputs: Sequence[Any] | Any,
                 plan: Plan | PlanDoc, backend: str | Backend = "cpu", *,
                 runnable: Any = None, options: ExecutorOptions | None = None,
                 **overrides: Any) -> None:
        from ..graph.torch_import import import_runnable

        opts = replace(options or ExecutorOptions(), **overrides)
        if not isinstance(example_inputs, (tuple, list)):
            example_inputs = (example_inputs,)
        self.original = module
        self.plan = _plan_of(plan)
        self.enable = opts.enable
        self.jitter = opts.jitter
        self._rng = random.Random(opts.jitter.seed if opts.jitter else 0)
        self.runnable = runnable or import_runnable(module, tuple(example_inputs), name=opts.name)
        # values are freed after their last use by this class's own count, which works
        # across streams (the base class's last-use map assumes one program order)
        super().__init__(self.runnable.graph_module, garbage_collect_values=False)
        self.garbage_collect_values = opts.garbage_collect_values
        self.graph_ir = self.runnable.graph
        self._check_plan(opts.validate)
        self.stream_ids = sorted(set(self.plan.assignment.values()) | {0})
        self.intra_op_threads = opts.intra_op_threads or default_threads(len(self.stream_ids))
        self.pin = pin_streams() if opts.pin is None else opts.pin
        self._backend_spec = backend
        self.backend: Any = None
        self.caps = Capabilities()  # the backend's, once it is made
        self.streams: dict[int, Any] = {}
        self._issue: dict[int, Any] = {}
        self._here_cpus: set[int] | None = None
        self._prepare()
        self._last_timeline: Timeline | None = None
        #: wrap each op in ``torch.profiler.record_function(op name)``: under the torch
        #: profiler its kernels then carry the plan's op name (``gpu_user_annotation``
        #: spans on cuda; :func:`parastream.runtime.profiler.kernel_timeline`)
        self.annotate = False

    def _check_plan(self, validate: bool) -> None:
        """The plan's events proved sufficient (``validate``) and every op on a stream."""
        if validate:
            from ..plan.hb import check

            check(self.graph_ir, self.plan)
        missing = [o.name for o in self.graph_ir.ops if o.name not in self.plan.assignment]
        if missing:
            from ..plan.model import PlanError

            raise PlanError(f"op(s) without a stream: {', '.join(missing[:10])}")

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> None:
        """Per op node: stream, plan op name, waits, records; lazy nodes; cross-stream reads."""
        waits, records = self._events_by_op()
        stream_of_node = self._sort_nodes(waits, records)
        self._op_info = {t[0]: t for t in self.op_nodes}  # node -> its op_nodes entry
        self._views_before = self._views_taken_before()
        # what each op reads, directly or through lazy views (the views included)
        reached = {n: list(dict.fromkeys(
            _reached(n, self.lazy) + [a for v in self._views_before.get(n, ())
                                      for a in [v, *_reached(v, self.lazy)]]))
            for n, *_rest in self.op_nodes}
        # tensors read on another stream than their producer's (record_stream on devices)
        self.cross: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for n, s, _, _, _ in self.op_nodes:
            reads = [a for a in reached[n] if a not in self.lazy
                     and stream_of_node.get(a) is not None and stream_of_node[a] != s]
            if reads:
                self.cross[n] = reads
        self._plan_frees(reached)
        self._plan_fast_bindings()

    def _events_by_op(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """(op -> events it waits on, op -> events recorded after it), as indices into the
        plan's events; the end-join events go to ``end_waits``."""
        waits: dict[str, list[int]] = {}
        records: dict[str, list[int]] = {}
        self.end_waits: list[int] = []
        for k, e in enumerate(self.plan.events):
            records.setdefault(e.record_after, []).append(k)
            if e.wait_before is None:
                self.end_waits.append(k)
            else:
                waits.setdefault(e.wait_before, []).append(k)
        return waits, records

    def _sort_nodes(self, waits: dict[str, list[int]],
                    records: dict[str, list[int]]) -> dict[torch.fx.Node, int | None]:
        """Sort the FX nodes into placeholders, the output, ops (``op_nodes``: node, stream
        id, op name, waits, records) and lazy nodes; returns each node's stream (None for
        placeholders and attributes, a lazy node's op's stream)."""
        rn = self.runnable
        assignment = self.plan.assignment
        self.op_nodes: list[tuple] = []  # (node, stream id, op name, waits, records)
        self.lazy: set[torch.fx.Node] = set()
        self.placeholders: list[torch.fx.Node] = []
        self.output_node: torch.fx.Node | None = None
        stream_of_node: dict[torch.fx.Node, int | None] = {}
        for n in self.graph.nodes:
            if n.op == "output":
                self.output_node = n
                continue
            if n.op == "placeholder":
                self.placeholders.append(n)
                stream_of_node[n] = None
                continue
            if n.op != "get_attr" and rn.node_kind.get(n.name) == "op":
                s = assignment[n.name]
                self.op_nodes.append((n, s, n.name, waits.get(n.name, []),
                                      records.get(n.name, [])))
                stream_of_node[n] = s
                continue
            self.lazy.add(n)  # an attribute, a folded view, an assert
            op = rn.node_op.get(n.name) if n.op != "get_attr" else None
            stream_of_node[n] = assignment.get(op) if op else None
        return stream_of_node

    def _views_taken_before(self) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """Views an op takes before it runs: those its in-place layout change would alter
        (the graph op's ``meta["views_before"]``)."""
        by_name = {n.name: n for n in self.graph.nodes}
        out: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for o in self.graph_ir.ops:
            names = (o.meta or {}).get("views_before")
            if names and o.name in by_name:
                out[by_name[o.name]] = [by_name[v] for v in names]
        return out

    def _plan_fast_bindings(self) -> None:
        """Faster bindings, validated on first use: node -> (binding, the check it must
        pass). An op that draws random numbers keeps its own call: the binding's
        first-call check would draw twice (an attention at dropout_p=0 draws nothing and
        keeps the binding)."""
        self._fast: dict[torch.fx.Node, Any] = {}
        self._fast_pending: dict[torch.fx.Node, tuple[Any, Any]] = {}
        self._draws = random_draws(self.graph_ir)  # (also named by _random_hint)
        draws = set(self._draws)
        for n, *_rest in self.op_nodes:
            fn = (_torch_binding(n.target) if n.op == "call_function" and n.name not in draws
                  else None)
            if fn is not None:
                self._fast_pending[n] = (fn, _bitwise_equal)
        for n in self.lazy:
            fn = _view_binding(n.target) if n.op == "call_function" else None
            if fn is not None:
                self._fast_pending[n] = (fn, _same_views)

    def _plan_frees(self, reached: dict[torch.fx.Node, list[torch.fx.Node]]) -> None:
        """Which values each op's completion frees: every value (lazy views too) an op
        reads, directly or through views, counts that op once, and leaves ``env`` when its
        last reader has run. Values the outputs read are kept; a value nobody reads counts
        its producer, so it goes as soon as it is made. With ``garbage_collect_values`` off
        nothing is freed before the call ends.

        Only intermediates of ``FREE_MIN_BYTES`` or more (and views of them) are freed
        early; smaller ones go when the call returns.

        Why: eager mode frees an intermediate after its last use, and so does
        ``torch.fx.Interpreter``; holding all of them to the end of the call multiplies
        the activation memory.
        Across streams, "last" is the last reader to finish, whatever stream it ran on;
        on devices a cross-stream read is ``record_stream``-ed, so the caching allocator
        does not reuse the block before that read has run."""
        self._frees: dict[torch.fx.Node, tuple[torch.fx.Node, ...]] = {
            n: () for n, *_rest in self.op_nodes}
        self._uses: dict[torch.fx.Node, int] = {}
        if not self.garbage_collect_values:
            return
        keep = set(_reached(self.output_node, self.lazy)) if self.output_node is not None \
            else set()
        # only op outputs and the lazy views over them hold memory the call made (inputs,
        # parameters and views of them are held by the caller and the module anyway), and
        # only big ones are worth freeing early: each free is Python work (about 1-2 us)
        # inside the op's interval on its stream, which a small tensor does not repay
        made = {n for n in self._op_info if _out_bytes(n) >= FREE_MIN_BYTES}
        for a in self.graph.nodes:  # topological: a view's bases come first
            if a in self.lazy and any(b in made for b in a.all_input_nodes):
                made.add(a)
        uses = self._uses
        read_at_all: set[torch.fx.Node] = set()
        for n, *_rest in self.op_nodes:
            read_at_all.update(reached[n])
            read = tuple(a for a in reached[n] if a in made and a not in keep)
            self._frees[n] = read
            for a in read:
                uses[a] = uses.get(a, 0) + 1
        for n, *_rest in self.op_nodes:
            if n in made and n not in keep and n not in read_at_all:
                self._frees[n] += (n,)  # read by no one: freed once made
                uses[n] = 1

    def _ensure_backend(self) -> None:
        if self.backend is not None:
            return
        from .host import set_intra_op_threads

        spec = self._backend_spec
        # the declared capabilities before the backend exists: its workers start with the
        # intra-op thread count set here; once it exists, the instance's own declaration
        # decides everything else
        declared = backend_capabilities(spec) if isinstance(spec, str) else capabilities_of(spec)
        if declared.host_threads:
            main_threads = torch.get_num_threads()
            set_intra_op_threads(self.intra_op_threads)
        self.backend = get_backend(spec) if isinstance(spec, str) else spec
        self.caps = capabilities_of(self.backend)
        self.streams = {s: self.backend.stream(str(s)) for s in self.stream_ids}
        # how run_node hands an op over: without a result handle where the stream can
        # (_exec stores the value itself), else through the protocol's submit
        self._issue = {s: st.launch if self.caps.launch else st.submit
                       for s, st in self.streams.items()}
        if self.caps.host_threads:
            self._start_workers()
        if declared.host_threads:
            set_intra_op_threads(main_threads)

    def _start_workers(self) -> None:
        """Each host worker fixes its torch thread count at its first parallel call, and
        turns autograd off for good: grad mode is per thread, and the caller's no_grad
        does not reach the workers (they would build autograd graphs for every op whose
        input came from a weight, and keep its saved tensors alive)."""
        n = len(self.streams)
        works = [st.submit(_worker_init,
                           stream_cpus(k, n, self.intra_op_threads) if self.pin else None,
                           name="init")
                 for k, st in enumerate(self.streams.values())]
        for w in works:
            w.result()
        # stream 0 runs on the calling thread (run): pinned there, while it runs
        self._here_cpus = stream_cpus(0, n, self.intra_op_threads) if self.pin else None
        self.backend.clear_records()

    @property
    def host_streams(self) -> bool:
        """True when streams are host worker threads (values appear asynchronously)."""
        self._ensure_backend()
        return bool(self.backend.host_synchronous)

    def close(self) -> None:
        """Stop the stream workers (a later call starts fresh ones)."""
        if self.backend is not None:
            self.backend.close()
        self.backend, self.streams, self._issue = None, {}, {}
        self.caps = Capabilities()

    def __enter__(self) -> "MultiStreamExecutor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ running
    def __call__(self, *inputs: Any) -> Any:
        if not self.enable:
            return self.original(*inputs)
        with torch.no_grad():
            return self.run(*inputs)

    def run(self, *inputs: Any, initial_env: Any = None, enable_io_processing: bool = True) -> Any:
        """One multi-stream call; returns the module's outputs."""
        self._ensure_backend()
        self.env = {}
        for node, value in zip(self.placeholders, self.runnable.bind(inputs)):
            self.env[node] = value
        caps = self.caps
        if caps.own_records:
            self.backend.clear_records()
        try:  # a device backend is in its run mode from begin(): close() ends it
            if caps.run_brackets:
                self.backend.begin([self.streams[s] for s in self.stream_ids])
            self._events = [self.backend.event() for _ in self.plan.events]
        except BaseException:
            self.close()
            raise
        self._left = dict(self._uses)
        # a host stream's worker could not run before the issue loop ends anyway (this
        # thread holds the GIL), so each gets its whole program in one hand-off; on an
        # error below, close() releases what is still held
        held = list(self.streams.values()) if caps.holds_streams else []
        for st in held:
            st.hold()
        try:
            out = self._issue_and_join(held)
        except StreamError as exc:
            self.close()  # a stream error is sticky: start fresh workers next call
            if isinstance(exc.cause, MissingSyncError):
                raise exc.cause from None
            raise
        except BaseException:
            self.close()
            raise
        self._last_timeline = None
        return out

    def _issue_and_join(self, held: list[Any]) -> Any:
        """Issue every op, join the streams on stream 0 and return the outputs."""
        for item in self._issue_order():
            self.run_node(item[0])
        main = self.streams[0]
        for k in self.end_waits:
            main.wait_event(self._events[k])
        if not self.backend.host_synchronous:
            # the caller's stream current again and joined to main first: what the
            # outputs launch (input and buffer write-backs) is ordered after the run
            if self.caps.run_brackets:
                self.backend.end(main)
            return self._outputs()
        # stream 0's program runs on this thread (host streams that can be held): no
        # hand-off, no sleep until the other streams end, and it uses this thread's
        # OpenMP team (a worker's threaded op wakes a second team through the kernel);
        # the others go to their workers first, so they start while this one computes
        here = main if self.caps.holds_streams else None
        for st in held:
            if st is not here:
                st.release()
        if here is not None:
            self._run_main_here(here)
        else:
            main.synchronize()
        out = self._outputs()
        for s in self.stream_ids[1:]:
            self.streams[s].synchronize()
        return out

    def _run_main_here(self, main: Any) -> None:
        """Run stream 0's issued program on the calling thread with the stream's intra-op
        thread count (restored after), as a worker would; raise its stream error.

        Changing the count (multi-stream plans only) also changes torch's default for
        threads that first run torch during the call; the stream workers fixed theirs when
        they started. An interrupt (Ctrl-C reaches this thread only) is raised as it is,
        after the stream's recordings still ahead are failed (:meth:`CpuStream.run_here`)."""
        threads = torch.get_num_threads()
        if threads != self.intra_op_threads:
            torch.set_num_threads(self.intra_op_threads)  # this thread's own count
        cpus, mask = self._here_cpus, None
        if cpus:
            try:
                mask = os.sched_getaffinity(0)
                os.sched_setaffinity(0, cpus)
            except (AttributeError, OSError):
                mask = None
        try:
            with torch.no_grad():
                main.run_here()
        finally:
            if threads != self.intra_op_threads:
                torch.set_num_threads(threads)
            if mask is not None:
                os.sched_setaffinity(0, mask)
        if main.error is not None:
            raise main.error

    def run_node(self, n: torch.fx.Node) -> Any:
        """Host side of one op: wait, hand to its stream, record (switch/wait/run/record)."""
        _, s, name, waits, records = self._op_info[n]
        stream = self.streams[s]
        for k in waits:
            stream.wait_event(self._events[k])
        self._issue[s](self._exec, n, name=name)
        for k in records:
            stream.record_event(self._events[k])

    def _exec(self, n: torch.fx.Node) -> None:
        """Stream side of one op: read its inputs, run it, store its value."""
        j = self.jitter
        if j is not None and self._rng.random() < j.prob:
            us = self._rng.random() * j.max_delay_us
            # a device backend delays the op on its stream (a host sleep there only delays
            # the launch, and a missing wait would stay hidden behind the queue)
            if self.caps.device_delay:
                self.backend.delay(us)
            else:
                time.sleep(us * 1e-6)
        for v in self._views_before.get(n, ()):
            self._value(v)
        args = map_arg(n.args, self._value)
        kwargs = map_arg(n.kwargs, self._value)
        if n in self.cross and self.caps.record_stream:
            stream = self.streams[self._op_info[n][1]]
            for a in self.cross[n]:
                self.backend.record_stream(self.env.get(a), stream)
        if self.annotate:
            with torch.profiler.record_function(self._op_info[n][2]):
                self.env[n] = self._call(n, args, kwargs)
        else:
            self.env[n] = self._call(n, args, kwargs)
        frees = self._frees[n]
        if frees:
            del args, kwargs  # this op's own references go with its inputs
            # no lock although readers on two streams may finish at once: a decrement lost
            # to a thread switch leaves a count too high, which only keeps a value to the
            # end of the call; no interleaving reaches zero before the last reader is done
            env, left = self.env, self._left
            for a in frees:
                left[a] -= 1
                if not left[a]:
                    env.pop(a, None)

    def _call(self, n: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        """Run one node (an op, or a lazy view an op reads) on its inputs: through its
        validated faster binding when it has one."""
        if n.op != "call_function":
            return getattr(self, n.op)(n.target, args, kwargs)
        fast = self._fast.get(n)
        if fast is not None:
            return fast(*args, **kwargs)
        pending = self._fast_pending.pop(n, None)  # two streams may both get here: fine
        ref = n.target(*args, **kwargs)
        if pending is not None:
            fn, same = pending
            try:
                if same(ref, fn(*args, **kwargs)):
                    self._fast[n] = fn
            except Exception:  # a different signature: keep the OpOverload
                pass
        return ref

    def _value(self, a: torch.fx.Node) -> Any:
        v = self.env.get(a, _MISSING)
        if v is not _MISSING:
            return v
        if a in self.lazy:
            v = self._call(a, map_arg(a.args, self._value), map_arg(a.kwargs, self._value))
            self.env[a] = v
            return v
        raise MissingSyncError(f"{a.name!r} was read before it was produced: an event is "
                               "missing between its stream and the reader's")

    def _outputs(self) -> Any:
        flat = map_arg(self.output_node.args[0], self._value)
        bound = ({n.name: self.env[n] for n in self.placeholders if n in self.env}
                 if self.runnable.input_writes else None)
        return self.runnable.outputs(flat, bound)

    def _issue_order(self) -> list[tuple]:
        """Program order, or under jitter a random interleaving of the streams' FIFOs in which
        every event is recorded before it is waited on."""
        if self.jitter is None or not self.jitter.shuffle_issue:
            return self.op_nodes
        rec_op = [e.record_after for e in self.plan.events]
        queues: dict[int, list[tuple]] = {}
        for item in self.op_nodes:
            queues.setdefault(item[1], []).append(item)
        heads = {s: 0 for s in queues}
        issued: set[str] = set()
        out: list[tuple] = []
        rng = self._rng
        while len(out) < len(self.op_nodes):
            ready = [s for s, q in queues.items() if heads[s] < len(q)
                     and all(rec_op[k] in issued for k in q[heads[s]][3])]
            s = rng.choice(ready)
            item = queues[s][heads[s]]
            heads[s] += 1
            issued.add(item[2])
            out.append(item)
        return out

    # ------------------------------------------------------------------ references and checks
    def reference(self, *inputs: Any) -> Any:
        """The single-stream output: the original module. On the cpu backend it runs on
        stream 0's worker, with the same intra-op thread count as the streams, so a
        bitwise comparison is fair (some kernels round differently with other counts).
        nn.MultiheadAttention's fused fast path is off for it: eager inference takes it,
        the traced program cannot (its ops are the unfused ones), and the two round apart
        (a TransformerEncoderLayer: 4.8e-7 on every output)."""
        with no_mha_fastpath():
            if not self.host_streams:
                return call_model(self.original, inputs)
            try:
                return self.streams[0].submit(call_model, self.original, inputs,
                                              name="reference").result()
            except StreamError as exc:  # stream 0's worker ran it: call_model's error
                raise exc.cause from None

    def check(self, *inputs: Any, runs: int = 1, exact: bool | None = None,
              rtol: float = 1e-4, atol: float = 1e-5) -> Comparison:
        """Run ``runs`` times and compare each output with :meth:`reference`: bitwise on
        host backends, within tolerance on devices (``exact`` overrides)."""
        exact = self.host_streams if exact is None else exact
        # a model that writes its inputs or its buffers (x.mul_(2), a step counter) would
        # start every call from another state: each call here starts from the first one's
        # (every input: the eager reference may write one the traced program does not)
        with self.kept_state(inputs, every_input=True) as restore:
            # random draws (torch.rand, training dropout) start alike too
            device = self.caps.torch_device
            rng = _rng_state(device)
            expected = _clone(self.reference(*inputs))
            for i in range(runs):
                restore()
                _set_rng_state(rng, device)
                try:
                    got = self(*inputs)
                except (MissingSyncError, StreamError) as exc:
                    return Comparison(False, exact, error=f"run {i}: {exc}")
                c = compare(expected, got, exact=exact, rtol=rtol, atol=atol)
                if not c.ok:
                    c.error = c.error or (f"run {i}: " + c.describe() + self._random_hint())
                    return c
            return Comparison(True, exact)

    @contextlib.contextmanager
    def kept_state(self, inputs: Sequence[Any], state: bool = True,
                   every_input: bool = False) -> Iterator[Callable[[], None]]:
        """What a call on ``inputs`` writes (:meth:`_snapshot`: the inputs and state it
        writes, their layout too) is put back when the block ends; the block gets the
        function that puts it back now, between calls. ``state=False`` keeps the inputs
        only: the module's buffers (a cache, a step counter) carry over as in serving.
        ``every_input`` keeps every input tensor, also those the traced program does not
        write: the eager module may (``if self.calls > 1: x.add_(1)``)."""
        written = self._snapshot(inputs, state=state, every_input=every_input)
        try:
            yield lambda: _restore(written)
        finally:
            _restore(written)

    def _random_hint(self) -> str:
        """Why a model that draws random numbers may differ with no missing sync."""
        draws = self._draws
        if not draws:
            return ""
        return (f" (the model draws random numbers: {', '.join(draws[:4])}; the check starts "
                "each call from the same generator state, but a torch.manual_seed inside "
                "forward is not part of the traced program)")

    def _snapshot(self, inputs: Sequence[Any], state: bool = True,
                  every_input: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(tensor, copy) for every tensor a call writes: inputs and state that an in-place
        op of the program writes (through views too), functional buffer and input updates;
        for a torch.fx trace, whose module calls may write anything, every input and buffer.
        Only those are copied (a whole model's weights would double its memory), and only
        dense tensors with data (no sparse, no meta). ``state=False``: the inputs only;
        ``every_input``: every input tensor, written by the program or not."""
        import torch.utils._pytree as pytree

        rn = self.runnable
        tensors: list[Any] = list(rn.buffer_writes.values()) if state else []
        if every_input:
            tensors += pytree.tree_leaves(tuple(inputs))
        if rn.source == "torch.export":
            bound = dict(zip((n.name for n in self.placeholders), rn.bind(inputs)))
            for name in _written_placeholders(self.graph) | set(rn.input_writes.values()):
                if name in rn.state:
                    if state:
                        tensors.append(rn.state[name])
                else:
                    tensors.append(bound.get(name))
        else:
            tensors += pytree.tree_leaves(tuple(inputs))
            if state:
                tensors += self.original.buffers()
        return _save(tensors)

    # ------------------------------------------------------------------ timeline
    def timeline(self, source: str | None = None) -> Timeline:
        """The last run's timeline: op names = plan op names, streams "0", "1", ..."""
        if self.backend is None:
            raise RuntimeError("no run yet")
        tl = self.backend.timeline(source or f"{self.graph_ir.name}: {self.plan.name}")
        tl.meta.setdefault("label", self.plan.name)
        return tl


_BINDING_MODULES = ("_VariableFunctions", "_nn", "_linalg", "_special", "_fft")


def _aten_kind(target: Any) -> str | None:
    """``"pure"`` for a non-mutating aten OpOverload returning new tensors, ``"view"`` for
    one returning an alias of its input, None for anything else (mutating, not aten)."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    schema = target._schema
    if schema.is_mutable:
        return None
    return "view" if any(r.alias_info is not None for r in schema.returns) else "pure"


def _torch_binding(target: Any) -> Any:
    """The ``torch.*`` python binding of a pure (non-mutating) aten OpOverload, or None.

    The ``torch.*`` bindings release the GIL while they compute; calling an ``OpOverload``
    does not hold it released for the whole op, so without them two cpu streams cannot
    overlap. Kept only when the first call is bitwise identical."""
    if _aten_kind(target) != "pure":
        return None
    name = target.overloadpacket.__name__
    for mod in _BINDING_MODULES:
        fn = getattr(getattr(torch._C, mod, None), name, None)
        if callable(fn):
            return fn
    return None


def _view_binding(target: Any) -> Any:
    """The ``torch.*`` function, else the ``Tensor`` method, of an aten view op, or None:
    a fraction of the ``OpOverload`` call's cost. Kept only when the first call returns the same view of the same
    memory (:func:`_same_views`): a later in-place write through the view (a cache update)
    must land where the original's would."""
    if _aten_kind(target) != "view":
        return None
    name = target.overloadpacket.__name__
    fn = getattr(torch._C._VariableFunctions, name, None) or getattr(torch.Tensor, name, None)
    return fn if callable(fn) else None


def _bitwise_equal(ref: Any, got: Any) -> bool:
    return compare(ref, got, exact=True).ok


def _same_views(ref: Any, got: Any) -> bool:
    """Both are the same view(s) of the same memory: shape, strides, offset, dtype, data."""
    if isinstance(ref, torch.Tensor):
        return (isinstance(got, torch.Tensor) and ref.dtype == got.dtype
                and ref.shape == got.shape and ref.stride() == got.stride()
                and ref.storage_offset() == got.storage_offset()
                and ref.untyped_storage().data_ptr() == got.untyped_storage().data_ptr())
    if isinstance(ref, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(ref) == len(got) and \
            all(_same_views(r, g) for r, g in zip(ref, got))
    return False


#: set to 1 to pin cpu stream workers by default (see :func:`stream_cpus`)
PIN_ENV = "PARASTREAM_PIN_STREAMS"


def pin_streams() -> bool:
    """Whether cpu stream workers are pinned when the caller does not say
    (``PARASTREAM_PIN_STREAMS=1``)."""
    return os.environ.get(PIN_ENV, "") == "1"


def stream_cpus(k: int, streams: int, threads: int) -> set[int] | None:
    """The cores stream ``k`` of ``streams`` (``threads`` intra-op threads each) is pinned
    to: its own slice of the cores this process may use. None with one stream, or when
    the streams' threads do not fit (then the OS shares the cores out).

    Why: on a small machine, two one-thread stream workers woken together by the issuing
    thread can be queued on the same core, and the second stream then starts only when
    the first one's whole program has run. Not the default: pinned workers can also come
    out slower, when the OS would have balanced them better (docs/benchmarks-run.md)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if streams < 2 or streams * threads > len(cpus):
        return None
    return set(cpus[k * threads:(k + 1) * threads])


def _worker_init(cpus: set[int] | None = None) -> int:
    """First task of a cpu stream's worker thread: inference mode for that thread, and
    its cores when pinned (before its first parallel op, so the intra-op threads it then
    starts inherit them)."""
    torch.set_grad_enabled(False)
    if cpus:
        try:
            os.sched_setaffinity(threading.get_native_id(), cpus)
        except (AttributeError, OSError):  # not on this OS, or the cores went away: unpinned
            pass
    return torch.get_num_threads()


def call_model(module: Any, inputs: Sequence[Any]) -> Any:
    """The module itself on ``inputs``, without autograd; what it raises is the model's
    own error (:class:`ModelCallError`), told apart from a traced op's (StreamError)."""
    with torch.no_grad():
        try:
            return module(*inputs)
        except Exception as exc:  # the user's code: whatever it raises is the model's
            raise ModelCallError(exc) from exc


def _written_placeholders(graph: torch.fx.Graph) -> set[str]:
    """Placeholders an in-place op of ``graph`` writes, directly or through views (a
    KV-cache slice's ``copy_``): each written argument is followed back through its first
    arguments to where it starts (over-reaching at worst: then a tensor is copied that
    the call did not need restored)."""
    out: set[str] = set()
    for n in graph.nodes:
        schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
        if schema is None or not schema.is_mutable:
            continue
        for v in written_args(schema, n.args, n.kwargs):
            while isinstance(v, torch.fx.Node) and v.op == "call_function" and v.args:
                v = v.args[0]
            if isinstance(v, torch.fx.Node) and v.op == "placeholder":
                out.add(v.name)
    return out


def _rng_state(device: str | None) -> tuple[torch.Tensor, Any]:
    """The host's random generator state, and the device's (all its devices) when the
    streams run on one (``Capabilities.torch_device``: never initialised for a host run)."""
    mod = getattr(torch, device, None) if device else None
    dev = mod.get_rng_state_all() if mod is not None and mod.is_available() else None
    return torch.get_rng_state(), dev


def _set_rng_state(state: tuple[torch.Tensor, Any], device: str | None) -> None:
    host, dev = state
    torch.set_rng_state(host)
    if dev is not None:
        getattr(torch, device).set_rng_state_all(dev)


def _restore(saved: list[tuple[torch.Tensor, torch.Tensor, tuple]]) -> None:
    """Put each tensor back in its layout and write its copy back into it
    (:meth:`MultiStreamExecutor._snapshot`)."""
    with torch.no_grad():
        for t, s, (size, stride, offset) in saved:
            if (t.size(), t.stride(), t.storage_offset()) != (size, stride, offset):
                t.as_strided_(size, stride, offset)
            t.copy_(s)


def _save(tensors: Sequence[Any]) -> list[tuple[torch.Tensor, torch.Tensor, tuple]]:
    """(tensor, copy, layout) for each distinct dense tensor with data among ``tensors``
    (no sparse, no meta), what :func:`_restore` puts back. The layout too: an in-place
    view op (x.unsqueeze_(0), x.t_()) changes a tensor's shape, not its data."""
    found: dict[int, torch.Tensor] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type != "meta":
            found.setdefault(id(t), t)
    with torch.no_grad():
        return [(t, t.detach().clone(), (t.size(), t.stride(), t.storage_offset()))
                for t in found.values()]


def keep_inputs(inputs: Sequence[Any], call: Callable[[], Any]) -> Callable[[], None]:
    """Run ``call`` once and return what puts back, as they were before it, the inputs it
    changed (their data or their layout); a no-op when it changed none. For a call timed
    on its own (each side of ``run`` in a process of its own), where no executor's graph
    says which inputs the program writes: a model that writes its input in place would
    otherwise be timed on what the calls before left there."""
    import torch.utils._pytree as pytree

    saved = _save(pytree.tree_leaves(tuple(inputs)))
    call()
    changed = [(t, s, layout) for t, s, layout in saved
               if (t.size(), t.stride(), t.storage_offset()) != layout or not torch.equal(t, s)]
    return (lambda: _restore(changed)) if changed else (lambda: None)


def _clone(v: Any) -> Any:
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, v)


#: intermediates smaller than this stay until the call returns (see ``_plan_frees``)
FREE_MIN_BYTES = 256 * 1024


def _out_bytes(n: torch.fx.Node) -> int:
    """Bytes of an fx node's example output (its fake tensors), 0 when unknown."""
    import torch.utils._pytree as pytree

    total = 0
    for t in pytree.tree_leaves(n.meta.get("val")):
        if isinstance(t, torch.Tensor):
            try:
                total += t.numel() * t.element_size()
            except Exception:  # symbolic sizes
                pass
    return total


def _reached(n: torch.fx.Node, lazy: set) -> list[torch.fx.Node]:
    """Every node ``n`` reads, directly or through lazy views (the views included)."""
    out: list[torch.fx.Node] = []
    seen: set = set()
    stack = list(n.all_input_nodes)
    while stack:
        a = stack.pop()
        if a in seen:
            continue
        seen.add(a)
        out.append(a)
        if a in lazy:
            stack.extend(a.all_input_nodes)
    return out


__all__ = ["Comparison", "ExecutorOptions", "Jitter", "MissingSyncError", "MultiStreamExecutor",
           "compare", "default_threads"]
