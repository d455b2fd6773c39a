"""The multi-stream executor: outputs identical to single stream for every zoo model and
planner algorithm (also under jitter), broken plans caught, enable switch, timelines."""

from __future__ import annotations

import msgspec
import pytest
import torch

from parastream.graph.torch_import import import_runnable
from parastream.zoo import ZOO
from parastream.plan.assign import assign
from parastream.plan.hb import check as hb_check
from parastream.plan.model import Plan, PlanError
from parastream.runtime import executor as executor_module
from parastream.runtime.executor import (Jitter, MissingSyncError, MultiStreamExecutor, _reached,
                                         compare)

ALGOS = ("single", "matching", "critical-path", "resource-split")


@pytest.fixture(scope="module")
def tiny_models():
    out = {}
    for name, zm in ZOO.items():
        module, inputs = zm.factory("tiny", zm.phases[0])
        out[name] = (module, inputs, import_runnable(module, inputs, name=name))
    return out


@pytest.fixture
def free_every_size(monkeypatch):
    """Free every intermediate after its last reader (by default only big ones are, and the
    tiny models have none)."""
    monkeypatch.setattr(executor_module, "FREE_MIN_BYTES", 0)


@pytest.mark.parametrize("name", list(ZOO))
def test_every_model_and_algorithm_bitwise_also_under_200_jittered_runs(tiny_models, name,
                                                                        free_every_size):
    # every intermediate freed after its last reader: jitter must not find a value freed
    # under a later reader
    module, inputs, rn = tiny_models[name]
    for k, algo in enumerate(ALGOS):
        plan = assign(rn.graph, algo, max_streams=2)
        with MultiStreamExecutor(module, inputs, plan, runnable=rn) as ex:
            c = ex.check(*inputs, runs=2)
            assert c.ok and c.exact, (algo, c.describe())
        # 4 algorithms x 50 jittered runs = 200 per model
        jit = Jitter(seed=k, prob=0.5, max_delay_us=60)
        with MultiStreamExecutor(module, inputs, plan, runnable=rn, jitter=jit) as ex:
            c = ex.check(*inputs, runs=50)
            assert c.ok, (algo, c.error)


def _plan_without_wait(rn, index=4):
    plan = assign(rn.graph, "matching", max_streams=2)
    waits = [i for i, e in enumerate(plan.events) if e.wait_before is not None]
    k = waits[index % len(waits)]
    return plan, msgspec.structs.replace(
        plan, events=[e for i, e in enumerate(plan.events) if i != k])


def test_removed_wait_is_caught_by_validator_and_by_jitter(tiny_models):
    module, inputs, rn = tiny_models["llama_layer"]
    _, broken = _plan_without_wait(rn)
    with pytest.raises(PlanError):
        hb_check(rn.graph, broken)
    with pytest.raises(PlanError):
        MultiStreamExecutor(module, inputs, broken, runnable=rn)
    # without the validator, jitter exposes the race (not silently accepted)
    with MultiStreamExecutor(module, inputs, broken, runnable=rn, validate=False,
                             jitter=Jitter(seed=3, prob=0.7, max_delay_us=300)) as ex:
        c = ex.check(*inputs, runs=100)
    assert not c.ok
    assert "read before it was produced" in (c.error or "") or c.mismatched


def test_missing_sync_error_type(tiny_models):
    module, inputs, rn = tiny_models["llama_layer"]
    _, broken = _plan_without_wait(rn)
    ex = MultiStreamExecutor(module, inputs, broken, runnable=rn, validate=False,
                             jitter=Jitter(seed=5, prob=1.0, max_delay_us=500))
    with pytest.raises(MissingSyncError):
        for _ in range(100):
            ex(*inputs)
    ex.close()


def test_enable_switch_off_runs_the_original_module(tiny_models):
    module, inputs, rn = tiny_models["moe_layer"]
    plan = assign(rn.graph, "matching", max_streams=2)
    calls = []
    h = module.register_forward_hook(lambda *a: calls.append(1))
    try:
        ex = MultiStreamExecutor(module, inputs, plan, runnable=rn, enable=False)
        out = ex(*inputs)
        assert calls == [1] and ex.backend is None  # no stream was ever created
        with torch.no_grad():
            assert compare(module(*inputs), out).ok
    finally:
        h.remove()


def test_timeline_names_plan_ops_and_streams(tiny_models):
    module, inputs, rn = tiny_models["inception_block"]
    plan = assign(rn.graph, "matching", max_streams=2)
    with MultiStreamExecutor(module, inputs, plan, runnable=rn) as ex:
        ex(*inputs)
        ex(*inputs)
        tl = ex.timeline()
    names = sorted(tl.op_name(i) for i in range(len(tl)))
    assert names == sorted(plan.assignment)  # exactly the last run, each op once
    for i in range(len(tl)):
        assert tl.streams[int(tl.stream[i])] == str(plan.assignment[tl.op_name(i)])
    assert set(tl.streams) == {"0", "1"}


def test_worker_threads_keep_their_intra_op_count(tiny_models):
    module, inputs, rn = tiny_models["inception_block"]
    plan = assign(rn.graph, "matching", max_streams=2)
    before = torch.get_num_threads()
    with MultiStreamExecutor(module, inputs, plan, runnable=rn, intra_op_threads=1) as ex:
        ex(*inputs)
        seen = [s.submit(torch.get_num_threads).result() for s in ex.streams.values()]
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_stream_zero_runs_on_the_calling_thread_with_its_own_thread_count(tiny_models,
                                                                        monkeypatch):
    import threading

    module, inputs, rn = tiny_models["inception_block"]
    plan = assign(rn.graph, "matching", max_streams=2)
    seen: dict[int, set] = {0: set(), 1: set()}
    real = MultiStreamExecutor._exec

    def spy(self, n):
        seen[self._op_info[n][1]].add((threading.get_ident(), torch.get_num_threads()))
        return real(self, n)

    monkeypatch.setattr(MultiStreamExecutor, "_exec", spy)
    before = torch.get_num_threads()
    with MultiStreamExecutor(module, inputs, plan, runnable=rn, intra_op_threads=1) as ex:
        with torch.no_grad():
            assert compare(module(*inputs), ex(*inputs)).ok
    me = threading.get_ident()
    assert seen[0] == {(me, 1)}                       # here, on the stream's one thread
    assert len(seen[1]) == 1 and next(iter(seen[1]))[0] != me
    assert torch.get_num_threads() == before          # this thread's count is given back


def test_an_interrupt_in_a_stream_zero_op_is_raised_as_it_is(tiny_models, monkeypatch):
    module, inputs, rn = tiny_models["inception_block"]
    plan = assign(rn.graph, "matching", max_streams=2)
    real = MultiStreamExecutor._exec
    hit = {"n": 0}

    def interrupt_once(self, n):
        if self._op_info[n][1] == 0 and not hit["n"]:
            hit["n"] += 1
            raise KeyboardInterrupt
        return real(self, n)

    monkeypatch.setattr(MultiStreamExecutor, "_exec", interrupt_once)
    ex = MultiStreamExecutor(module, inputs, plan, runnable=rn)
    with pytest.raises(KeyboardInterrupt):   # not a StreamError that check() would swallow
        ex(*inputs)
    assert ex.backend is None                # closed; the next call starts fresh workers
    with torch.no_grad():
        assert compare(module(*inputs), ex(*inputs)).ok
    ex.close()


def test_stream_workers_get_their_own_cores_when_asked_and_they_fit(tiny_models, monkeypatch):
    import os
    import threading

    from parastream.runtime.executor import stream_cpus

    cpus = sorted(os.sched_getaffinity(0))
    assert stream_cpus(0, 1, len(cpus)) is None                 # one stream: not pinned
    assert stream_cpus(0, len(cpus) + 1, 1) is None             # more threads than cores
    if len(cpus) < 2:
        pytest.skip("needs two cores")
    assert stream_cpus(0, 2, 1) == {cpus[0]} and stream_cpus(1, 2, 1) == {cpus[1]}
    module, inputs, rn = tiny_models["inception_block"]
    plan = assign(rn.graph, "matching", max_streams=2)

    def mask():
        return os.sched_getaffinity(threading.get_native_id())

    here: list[set] = []  # stream 0's ops run on this thread: its mask while they run
    real = MultiStreamExecutor._exec

    def spy(self, n):
        if self._op_info[n][1] == 0:
            here.append(mask())
        return real(self, n)

    monkeypatch.setattr(MultiStreamExecutor, "_exec", spy)
    pinned, free = [{cpus[0]}, {cpus[1]}], [set(cpus), set(cpus)]
    for pin, env, expect in ((True, "", pinned), (False, "1", free), (None, "", free),
                             (None, "1", pinned)):
        monkeypatch.setenv("PARASTREAM_PIN_STREAMS", env)
        here.clear()
        with MultiStreamExecutor(module, inputs, plan, runnable=rn, intra_op_threads=1,
                                 pin=pin) as ex:
            ex(*inputs)
            assert [s.submit(mask).result() for s in ex.streams.values()] == expect
        assert here and all(m == expect[0] for m in here)
        assert mask() == set(cpus)
    assert os.sched_getaffinity(0) == set(cpus)                  # the process is untouched


def test_workers_run_without_autograd(tiny_models):
    # grad mode is per thread: the caller's no_grad does not reach the stream workers, so
    # they turn it off themselves (else every op on a weight builds an autograd graph)
    module, inputs, rn = tiny_models["llama_layer"]
    assert any(p.requires_grad for p in module.parameters())
    from parastream.cpu.backend import CpuBackend

    plan = assign(rn.graph, "matching", max_streams=2)
    for backend in ("cpu", CpuBackend()):  # a backend instance the caller made, too
        with MultiStreamExecutor(module, inputs, plan, runnable=rn, backend=backend) as ex:
            out = ex(*inputs)
            grad_on = [s.submit(torch.is_grad_enabled).result() for s in ex.streams.values()]
        outs = out if isinstance(out, (tuple, list)) else (out,)
        assert grad_on == [False, False], backend
        assert all(o.grad_fn is None and not o.requires_grad
                   for o in outs if isinstance(o, torch.Tensor))


@pytest.mark.parametrize("name", ["llama_stack", "inception_block", "moe_layer"])
def test_intermediates_are_freed_after_their_last_reader(tiny_models, name, free_every_size):
    """As in eager mode, an op's output leaves the executor once every op reading it (on
    any stream) has run: after a call only what the outputs read is held, and during it
    far fewer values than ops are alive. Off, everything is held to the end. (Every size
    is freed here; by default only intermediates of FREE_MIN_BYTES or more are.)"""
    module, inputs, rn = tiny_models[name]
    plan = assign(rn.graph, "matching", max_streams=2)
    with MultiStreamExecutor(module, inputs, plan, runnable=rn) as ex:
        alive = []
        run_op = ex._exec

        def counting(n):
            run_op(n)
            alive.append(sum(1 for v in list(ex.env) if v in ex._op_info))

        ex._exec = counting
        c = ex.check(*inputs, runs=3)
        assert c.ok and c.exact, c.describe()
        held = {v for v in ex.env if v in ex._op_info}
        assert held <= set(_reached(ex.output_node, ex.lazy))
    assert max(alive) < len(ex.op_nodes) / 2, (max(alive), len(ex.op_nodes))
    with MultiStreamExecutor(module, inputs, plan, runnable=rn,
                             garbage_collect_values=False) as ex:
        ex(*inputs)
        assert {v for v in ex.env if v in ex._op_info} == set(ex._op_info)


def test_only_big_intermediates_are_freed_early():
    """Small tensors stay to the end of the call (freeing them costs more than they
    hold); at the zoo's small scale the big ones are freed and the outputs still match."""
    zm = ZOO["llama_layer"]
    for scale, expect_frees in (("tiny", False), ("small", True)):
        module, inputs = zm.factory(scale, zm.phases[0])
        rn = import_runnable(module, inputs, name="llama_layer")
        plan = assign(rn.graph, "matching", max_streams=2)
        with MultiStreamExecutor(module, inputs, plan, runnable=rn) as ex:
            freed = {a for f in ex._frees.values() for a in f}
            assert bool(freed) == expect_frees, scale
            assert all(executor_module._out_bytes(a) >= executor_module.FREE_MIN_BYTES
                       for a in freed if a in ex._op_info)
            c = ex.check(*inputs, runs=2)
            assert c.ok and c.exact, c.describe()


def test_a_value_read_on_two_streams_waits_for_both_readers_before_it_goes(free_every_size):
    """y is read by an op on each stream; whichever reader finishes first must not free
    it under the other (jittered delays and issue orders, 200 runs, bitwise)."""
    from parastream.plan.assign import plan_from_assignment

    class Fork(torch.nn.Module):
        def forward(self, x, w):
            y = x @ w
            a = torch.relu(y).sum(0)
            b = torch.sigmoid(y.t()).sum(1)
            return a + b

    module, inputs = Fork(), (torch.randn(64, 64), torch.randn(64, 64))
    rn = import_runnable(module, inputs, name="fork")
    names = [o.name for o in rn.graph.ops]
    side = {n: 1 for n in names if n.startswith(("sigmoid", "sum_1"))}
    assignment = {n: side.get(n, 0) for n in names}
    plan = plan_from_assignment(rn.graph, assignment, name="fork")
    jit = Jitter(seed=11, prob=0.8, max_delay_us=200)
    with MultiStreamExecutor(module, inputs, plan, runnable=rn, jitter=jit) as ex:
        c = ex.check(*inputs, runs=200)
        assert c.ok and c.exact, c.error or c.describe()
        readers = [n.name for n, *_ in ex.op_nodes if any(v.name == "matmul" for v in ex._frees[n])]
    assert len(readers) == 2 and {assignment[r] for r in readers} == {0, 1}, readers


class _ViewsThenLayoutChange(torch.nn.Module):
    """Views of h taken, then h.t_(), then the views read on two streams."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x):
        h = self.a(x)
        row = h[0]
        cols = h[:, 1:5].t()  # a view of a view
        h.t_()
        return self.b(row * 2), torch.tanh(self.c(cols.reshape(4, -1)[:, :16])), h + 1


def test_views_taken_before_an_in_place_layout_change_see_the_old_layout():
    """Every algorithm and 200 jittered runs bitwise against eager, with the views read on
    a stream other than the t_'s: taken lazily by their readers they would view h.t()."""
    from parastream.plan.assign import plan_from_assignment

    module, inputs = _ViewsThenLayoutChange(), (torch.randn(16, 16),)
    rn = import_runnable(module, inputs, name="views_then_t_")
    names = [o.name for o in rn.graph.ops]
    t_op = next(o for o in rn.graph.ops if o.type == "t_")
    assert len(t_op.meta["views_before"]) >= 3  # select, slice, t (and the slice's base)
    side = {n: 1 for n in names if n.startswith(("mul", "linear_1"))}
    side.update({n: 2 for n in names if n.startswith(("reshape", "linear_2", "tanh"))})
    plans = [plan_from_assignment(rn.graph, {n: side.get(n, 0) for n in names}, name="hand")]
    plans += [assign(rn.graph, alg, max_streams=3) for alg in ALGOS]
    jit = Jitter(seed=7, prob=0.8, max_delay_us=200)
    for plan in plans:
        with MultiStreamExecutor(module, inputs, plan, runnable=rn, jitter=jit) as ex:
            c = ex.check(*inputs, runs=200 if plan.name == "hand" else 20)
            assert c.ok and c.exact, (plan.name, c.error or c.describe())


class _ValueThenLayout(torch.nn.Module):
    """The layout change reaches the tensor under a later name: torch.export's t_ reads
    the add_ / mul_ that wrote it in place, not the node the view was taken from."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.p, self.q = torch.nn.Linear(6, 6), torch.nn.Linear(4, 4)
        self.register_buffer("buf", torch.randn(4, 6))

    def forward(self, x):  # x: (4, 6)
        if self.where == "input":
            h = x
        elif self.where == "buffer":
            h = self.buf
        else:
            h = self.p(x)
        if self.where == "view":
            h = h[1:3]  # the base is itself a view
        v = h[0]
        h.mul_(2)
        h.t_()
        return self.p(v), h.sum(0)


@pytest.mark.parametrize("where", ["intermediate", "input", "buffer", "view"])
def test_a_view_is_taken_before_a_layout_change_that_reaches_its_base_under_another_name(
        where):
    module = _ValueThenLayout(where)
    x = torch.randn(4, 6)
    rn = import_runnable(module, (x,), name=f"value_then_t_{where}")
    t_op = next(o for o in rn.graph.ops if o.type == "t_")
    assert t_op.meta.get("views_before"), where
    with torch.no_grad():  # eager, on copies: the call writes its input and buffer
        expected = _ValueThenLayout(where)
        expected.load_state_dict(module.state_dict())
        want = expected(x.clone())
    for alg in ALGOS:
        plan = assign(rn.graph, alg, max_streams=2)
        with MultiStreamExecutor(module, (x,), plan, runnable=rn) as ex:
            with ex.kept_state((x,)):
                got = ex(x)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), (where, alg)
            c = ex.check(x, runs=5)
            assert c.ok and c.exact, (where, alg, c.error or c.describe())


class _AliasedInputs(torch.nn.Module):
    """Its two inputs share memory (a tensor passed next to a view of it)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh())
        self.b = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Sigmoid())

    def forward(self, x, part):
        x.add_(1)  # part sees it: its rows are x's
        return self.a(x) + self.b(part).sum(0)


def test_inputs_that_share_memory_are_ordered_as_one():
    """The write through x orders the read through part, on any stream (it did not:
    two inputs were two storages, and a branch read part before the add_)."""
    x = torch.randn(8, 64)
    module, inputs = _AliasedInputs(), (x, x[2:4])
    rn = import_runnable(module, inputs, name="aliased")
    add_ = next(o for o in rn.graph.ops if o.type == "add_")
    part_readers = [o.name for o in rn.graph.ops if any(t.name == "part" for t in o.inputs)]
    assert part_readers and all(
        any(e.src == add_.name and e.dst == r for e in rn.graph.edges) for r in part_readers)
    jit = Jitter(seed=3, prob=0.8, max_delay_us=300)
    for alg in ALGOS:
        plan = assign(rn.graph, alg, max_streams=2)
        with MultiStreamExecutor(module, inputs, plan, runnable=rn, jitter=jit) as ex:
            c = ex.check(*inputs, runs=30)
            assert c.ok and c.exact, (alg, c.error or c.describe())


def test_check_restores_inputs_only_the_eager_module_writes(writes_input_later):
    """The reference's write leaked into the traced program's input and the check said
    "identical"; every input is put back now, and the trace is seen to differ."""
    module, x = writes_input_later
    given = x.clone()
    rn = import_runnable(module, (x,), name="later_write")
    module.later = True
    with MultiStreamExecutor(module, (x,), Plan.single(o.name for o in rn.graph.ops),
                             runnable=rn) as ex:
        c = ex.check(x, runs=2)
    assert not c.ok and torch.equal(x, given)


def test_the_module_raising_in_checks_reference_call_is_the_models_error(writes_input_later):
    """Not a StreamError of an op named 'reference' (run blamed the traced program)."""
    from parastream.runtime.backend import ModelCallError

    module, x = writes_input_later
    rn = import_runnable(module, (x,), name="expires")
    module.lin.forward = lambda _x: (_ for _ in ()).throw(RuntimeError("session expired"))
    with MultiStreamExecutor(module, (x,), Plan.single(o.name for o in rn.graph.ops),
                             runnable=rn) as ex:
        with pytest.raises(ModelCallError, match="session expired") as info:
            ex.check(x)
    assert isinstance(info.value.cause, RuntimeError)


def test_lazy_views_run_through_their_torch_bindings_and_stay_views(tiny_models):
    """Lazy views (view, transpose, split, unsqueeze, ...) switch to their torch.* function
    or Tensor method after a first call that returned the very same view; outputs stay
    bitwise. A binding that copied instead of viewing would be refused."""
    module, inputs, rn = tiny_models["attention_prolog"]
    plan = assign(rn.graph, "matching", max_streams=2)
    with MultiStreamExecutor(module, inputs, plan, runnable=rn) as ex:
        c = ex.check(*inputs, runs=3)
        assert c.ok and c.exact, c.describe()
        fast_views = {str(a.target) for a in ex._fast if a in ex.lazy}
    assert {"aten.view.default", "aten.transpose.int"} <= fast_views, fast_views
    x = torch.randn(4, 6)
    assert executor_module._same_views(x.t(), torch.t(x))
    assert not executor_module._same_views(x.t(), x.t().contiguous())   # a copy, not a view
    assert not executor_module._same_views(x[:, 1:], x[:, :5])          # another offset


def test_a_write_through_a_lazy_view_lands_in_the_buffer():
    """A cache update through a slice (the KV-cache pattern) writes the module's buffer
    exactly as eager mode does, on every call, with the view's fast binding in use."""
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(8, 16))

        def forward(self, x):
            self.cache[2:6].copy_(x.view(4, 16) * 2)
            return self.cache.sum(0)

    x = torch.randn(64)
    eager = Cache()
    with torch.no_grad():
        want_out = eager(x)
    module = Cache()
    rn = import_runnable(module, (x,), name="cache")
    plan = assign(rn.graph, "single")
    with MultiStreamExecutor(module, (x,), plan, runnable=rn) as ex:
        for _ in range(3):
            module.cache.zero_()
            out = ex(x)
            assert torch.equal(out, want_out)
            assert torch.equal(module.cache, eager.cache)


def test_check_starts_every_call_from_the_same_inputs_and_state():
    """A model that writes its input (x.mul_) and a step counter gives another answer on
    every call: the check compares calls that start from the same state, and leaves the
    state as it found it."""
    class Stateful(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.la, self.lb = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
            self.register_buffer("count", torch.zeros(1))

        def forward(self, x):
            self.count.add_(1.0)
            a = self.la(x) * self.count
            x.mul_(2.0)
            return a, self.lb(x)

    torch.manual_seed(0)
    module, x = Stateful().eval(), torch.randn(2, 16)
    x0, c0 = x.clone(), module.count.clone()
    rn = import_runnable(module, (x,), name="stateful")
    for algo in ALGOS:
        plan = assign(rn.graph, algo, max_streams=2)
        with MultiStreamExecutor(module, (x,), plan, runnable=rn) as ex:
            cmp = ex.check(x, runs=3)
            assert cmp.ok, (algo, cmp.describe())
            assert ex.check(x, runs=20).ok if plan.stream_count() > 1 else True
        assert torch.equal(x, x0) and torch.equal(module.count, c0)
    # the restored state is what the calls depend on: without it the second call differs
    with MultiStreamExecutor(module, (x,), assign(rn.graph, "single"), runnable=rn) as ex:
        first = ex(x)
        assert not torch.equal(ex(x)[1], first[1])
        # only what the program writes is copied: not the weights (a 7B model's would
        # double its memory), and a sparse buffer nobody writes is left alone
        assert {id(t) for t, *_ in ex._snapshot((x,))} == {id(x), id(module.count)}
    module.register_buffer("adjacency", torch.eye(4).to_sparse())
    with MultiStreamExecutor(module, (x,), assign(rn.graph, "matching", max_streams=2),
                             runnable=rn) as ex:
        assert ex.check(x, runs=2).ok


def test_fx_fallback_runnable_maps_nodes():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.a(x)).view(-1) + self.b(x).view(-1)

    m, x = Two().eval(), torch.randn(4, 8)
    rn = import_runnable(m, (x,), method="fx")
    assert rn.source == "torch.fx"
    assert {k for k, v in rn.node_kind.items() if v == "op"} == {o.name for o in rn.graph.ops}
    plan = assign(rn.graph, "matching", max_streams=2)
    with MultiStreamExecutor(m, (x,), plan, runnable=rn) as ex:
        assert ex.check(x, runs=3).ok


def test_compare_tolerance_and_structure():
    a = (torch.ones(3), torch.zeros(2))
    assert compare(a, (torch.ones(3), torch.zeros(2))).ok
    b = (torch.ones(3) + 1e-7, torch.zeros(2))
    assert not compare(a, b).ok and compare(a, b, exact=False).ok
    assert not compare(a, (torch.ones(3),)).ok
