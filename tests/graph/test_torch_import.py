"""torch -> operator graph: op types, FLOPs, module paths, folded views, state and collective
edges, the fx fallback, and clear errors for models that cannot be traced."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from parastream.errors import InputError  # noqa: E402
from parastream.graph.ir import validate  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402


def by_type(g, t):
    return [o for o in g.ops if o.type == t]


def reaches(g, src: str, dst: str) -> bool:
    succ = g.successors()
    seen, stack = set(), [src]
    while stack:
        n = stack.pop()
        if n == dst:
            return True
        if n in seen:
            continue
        seen.add(n)
        stack.extend(e.dst for e in succ.get(n, []))
    return False


def test_linear_flops_at_7b_shapes_on_meta():
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(4096, 4096, bias=False))
        x = torch.randn(8, 1024, 4096, dtype=torch.float32)
    g = import_module(m, (x,), name="lin")
    validate(g)
    (op,) = g.ops
    tokens = 8 * 1024
    assert op.type == "linear" and op.resource == "cube" and op.module == "0"
    assert op.flops == 2 * tokens * 4096 * 4096
    assert op.bytes_read == (tokens * 4096 + 4096 * 4096) * 4
    assert op.bytes_written == tokens * 4096 * 4
    assert op.meta["target"] == "aten.linear.default"
    assert [t.name for t in op.inputs] == ["input", "0.weight"]  # Sequential names it input
    assert op.outputs[0].shape == [8, 1024, 4096] and op.outputs[0].dtype == "float32"


def test_multihead_attention_imports():
    e, h, b, t = 4096, 32, 2, 128
    with torch.device("meta"):
        mha = nn.MultiheadAttention(e, h, batch_first=True).eval()
        x = torch.randn(b, t, e)
    g = import_module(mha, (x, x, x), name="mha")
    validate(g)
    lin = by_type(g, "linear")
    assert len(lin) == 2                                   # packed in_proj and out_proj
    assert {o.flops for o in lin} == {2 * b * t * e * 3 * e + b * t * 3 * e,
                                      2 * b * t * e * e + b * t * e}
    # need_weights=True (the default) computes attention with bmm + softmax
    bmm = by_type(g, "bmm")
    assert len(bmm) == 2 and all(o.resource == "cube" for o in bmm)
    assert sum(o.flops for o in bmm) == 2 * (2 * b * h * t * t * (e // h))
    assert by_type(g, "softmax")[0].resource == "vector"
    assert not any(o.type in ("view", "transpose", "select", "unflatten") for o in g.ops)
    assert reaches(g, lin[0].name, lin[1].name)


def test_transformer_encoder_layer_imports():
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    x = torch.randn(2, 10, 64)
    g = import_module(layer, (x,), name="tel")
    order = validate(g)
    types = [o.type for o in g.ops]
    assert types.count("linear") == 4 and types.count("layer_norm") == 2
    assert types.count("scaled_dot_product_attention") == 1
    assert "dropout" not in types                          # eval dropout is free: folded
    mods = {o.module for o in g.ops if o.type == "linear"}
    assert mods == {"self_attn", "linear1", "linear2"}
    sdpa = by_type(g, "scaled_dot_product_attention")[0]
    assert sdpa.resource == "cube" and sdpa.flops == 4 * 2 * 4 * 10 * 10 * 16
    ffn1 = next(o for o in g.ops if o.module == "linear1")
    assert ffn1.flops == 2 * 20 * 64 * 128 + 20 * 128
    # one serial chain: the input projection comes first, the final norm last
    assert order[0] == g.ops[0].name and g.ops[-1].type == "layer_norm"
    assert reaches(g, g.ops[0].name, g.ops[-1].name)


class Views(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        y = self.a(x).view(4, 2, 16).transpose(0, 1).reshape(8, 16)   # the reshape copies
        z = self.a(x).view(8, 2, 8)[:, 0]                               # pure views
        return self.b(y) + z.sum()


def test_views_are_folded_and_copying_reshape_is_kept():
    g = import_module(Views(), (torch.randn(8, 16),), name="views")
    validate(g)
    types = [o.type for o in g.ops]
    for view in ("view", "transpose", "slice", "select"):
        assert view not in types
    reshape = by_type(g, "reshape")
    assert len(reshape) == 1 and reshape[0].resource == "memory"   # non-contiguous input
    assert g.meta["folded_views"] >= 4
    lin_a = [o for o in g.ops if o.module == "a"]
    sum_op = by_type(g, "sum")[0]
    # the sum consumes a select of a view of the second linear: wired straight to it
    assert any(e.src == lin_a[1].name and e.dst == sum_op.name and e.type == "data"
               for e in g.edges)
    assert sum_op.inputs[0].shape == [8, 8] and sum_op.inputs[0].name == lin_a[1].name


class Stateful(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8))
        self.p = nn.Linear(8, 8)

    def forward(self, x):
        old = self.cache.sum()                 # reads the cache ...
        self.cache[:2].copy_(self.p(x))        # ... before this write (write-after-read)
        y = self.p(x)
        y.add_(1.0)                            # in place on an activation
        return (self.cache * 2)[:2] + old + y  # reads after the write (read-after-write)


def test_buffer_writes_become_side_effects_and_state_edges():
    g = import_module(Stateful(), (torch.randn(2, 8),), name="state")
    validate(g)
    copy = by_type(g, "copy_")[0]
    assert copy.side_effects == ["writes:cache"] and copy.resource == "memory"
    assert copy.bytes_written == 2 * 8 * 4
    total = next(o for o in g.ops if o.type == "sum")
    war = [e for e in g.edges if e.type == "state" and e.src == total.name and e.dst == copy.name]
    assert war and "write-after-read" in war[0].reason
    mul = next(o for o in g.ops if o.type == "mul")
    assert reaches(g, copy.name, mul.name)
    add_ = by_type(g, "add_")[0]
    assert add_.side_effects == []            # an activation, not a named buffer
    assert reaches(g, add_.name, g.ops[-1].name)


def _all_reduce(x):
    from parastream.zoo import all_reduce

    return all_reduce(x)


class TwoCollectives(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x, y):
        return _all_reduce(self.a(x)), _all_reduce(self.b(y))


def test_collectives_are_comm_with_program_order_edges():
    g = import_module(TwoCollectives(), (torch.randn(2, 8), torch.randn(2, 8)), name="cc")
    validate(g)
    comm = [o for o in g.ops if o.resource == "comm"]
    assert [o.type for o in comm] == ["all_reduce", "all_reduce"]
    assert all(o.side_effects == ["collective:all_reduce"] for o in comm)
    assert all(o.flops == 0 and o.bytes_read == 2 * 8 * 4 for o in comm)
    order = [e for e in g.edges if e.type == "collective_order"]
    assert [(e.src, e.dst) for e in order] == [(comm[0].name, comm[1].name)]


def test_c10d_functional_collectives_are_recognised():
    class M(nn.Module):
        def forward(self, x):
            y = torch.ops._c10d_functional.all_reduce(x * 2, "sum", "default")
            y = torch.ops._c10d_functional.wait_tensor(y)
            return y + 1

    g = import_module(M(), (torch.randn(4),), name="c10d")
    validate(g)
    assert [o.type for o in g.ops] == ["mul", "all_reduce", "add"]   # wait_tensor folded
    assert g.ops[1].resource == "comm" and g.ops[1].side_effects == ["collective:all_reduce"]


class Simple(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x)))


def test_fx_fallback_matches_export():
    x = torch.randn(4, 32)
    ge = import_module(Simple(), (x,), name="s", method="export")
    gf = import_module(Simple(), (x,), name="s", method="fx")
    validate(gf)
    assert ge.meta["source"] == "torch.export" and gf.meta["source"] == "torch.fx"
    assert [o.type for o in ge.ops] == [o.type for o in gf.ops] == ["linear", "relu", "layer_norm"]
    assert [o.flops for o in ge.ops] == [o.flops for o in gf.ops]
    assert [o.module for o in gf.ops] == ["fc", "", "norm"]
    assert len(gf.edges) == 2


def test_auto_falls_back_to_fx_when_export_fails(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("export is broken here\nsecond line")

    monkeypatch.setattr(torch.export, "export", broken)
    g = import_module(Simple(), (torch.randn(4, 32),), name="s")
    assert g.meta["source"] == "torch.fx"
    assert g.meta["export_error"] == "torch.export: RuntimeError: export is broken here"


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_untraceable_model_is_an_input_error():
    with pytest.raises(InputError) as info:
        import_module(DataDependent(), (torch.randn(3),), name="ddm")
    msg = str(info.value)
    assert msg.startswith("ddm: cannot be traced")
    assert "torch.export" in msg and "torch.fx" in msg and "\n" not in msg


def test_not_a_module_is_an_input_error():
    with pytest.raises(InputError, match="expected a torch.nn.Module"):
        import_module(lambda x: x, (torch.randn(2),), name="fn")


def test_meta_module_imports_without_allocating():
    from parastream.zoo import llama_layer

    m, inputs = llama_layer("7b", "prefill")
    assert all(p.device.type == "meta" for p in m.parameters())
    g = import_module(m, inputs, name="llama")
    assert g.meta["params_bytes"] == sum(p.numel() * 2 for p in m.parameters())
    assert g.meta["params_bytes"] > 400e6     # ~200M parameters in bf16, none allocated


def test_pool_flops_count_every_window_element():
    m = torch.nn.Sequential(torch.nn.MaxPool2d(3, 1, 1), torch.nn.MaxPool2d(2, 2),
                            torch.nn.AdaptiveAvgPool2d(1))
    g = import_module(m, (torch.randn(1, 4, 8, 8),))
    pools = [o for o in g.ops if "pool" in o.type]
    # stride-1 3x3: 9 per output (4*8*8 outputs); 2x2 stride 2: 4 per output (4*4*4);
    # adaptive to 1x1: every input element once (4*4*4)
    assert [o.flops for o in pools] == [9.0 * 256, 4.0 * 64, 64.0]
    # the same through the torch.fx fallback (pools as called modules), and a keyword kernel
    g = import_module(m, (torch.randn(1, 4, 8, 8),), method="fx")
    assert [o.flops for o in g.ops if "pool" in o.type] == [9.0 * 256, 4.0 * 64, 64.0]

    class Kw(nn.Module):
        def forward(self, x):
            return torch.nn.functional.max_pool2d(x, kernel_size=3, stride=1, padding=1)

    for method in ("export", "fx"):
        g = import_module(Kw(), (torch.randn(1, 4, 8, 8),), method=method)
        assert [o.flops for o in g.ops if "pool" in o.type] == [9.0 * 256], method


def test_an_op_on_channels_last_data_says_so_in_its_meta():
    """An image permuted from HWC (what the zoo's inference pipeline feeds its conv net)
    is NHWC-strided; the conv keeps that layout and the pool after it runs another CPU
    kernel, so the cost model needs to know. Contiguous NCHW ops carry no such mark."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, img):
            x = img.permute(0, 3, 1, 2).float()
            return torch.nn.functional.max_pool2d(self.conv(x), 3, 2, 1), \
                torch.nn.functional.max_pool2d(self.conv(x.contiguous()), 3, 2, 1)

    for method in ("export", "fx"):
        g = import_module(Net().eval(), (torch.randint(0, 255, (2, 16, 16, 3), dtype=torch.uint8),),
                          method=method)
        pools = [o.meta.get("memory_format") for o in g.ops if o.type == "max_pool2d"]
        assert pools == ["channels_last", None], (method, pools)


def test_an_op_counts_the_folded_views_it_computes_first():
    """The executor computes a folded view inside the interval of the first op that reads
    it, once a call: the importer counts them on that op (meta ``views``) for the cost
    model; a later reader of the same view, and a view of a view's reader, count apart."""
    class Rotate(nn.Module):
        def forward(self, x):
            a, b = x[..., :8], x[..., 8:]            # two slices
            r = torch.cat([-b, a], dim=-1)             # neg reads b; cat reads a
            h = r.view(2, 4, 4).transpose(1, 2)        # view + transpose, read by mul
            return h * 2, b + 1                        # b again: already computed

    for method in ("export", "fx"):
        g = import_module(Rotate().eval(), (torch.randn(2, 16),), method=method)
        views = {o.type: (o.meta or {}).get("views", 0) for o in g.ops}
        assert views == {"neg": 1, "cat": 1, "mul": 2, "add": 0}, (method, views)
        assert sum(views.values()) == g.meta["folded_views"]

    class Halves(nn.Module):  # views behind a tuple element count too
        def forward(self, x):
            a, b = x.transpose(0, 1).chunk(2, dim=-1)   # transpose + chunk, then getitems
            return a * 2 + b

    for method in ("export", "fx"):
        g = import_module(Halves().eval(), (torch.randn(4, 2),), method=method)
        views = {o.type: (o.meta or {}).get("views", 0) for o in g.ops}
        assert views == {"mul": 2, "add": 0}, (method, views)


def test_max_unpool_still_imports():
    class Unpool(nn.Module):
        def forward(self, x):
            y, idx = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
            return torch.nn.functional.max_unpool2d(y, idx, 2)

    g = import_module(Unpool(), (torch.randn(1, 2, 4, 4),))
    assert any("unpool" in o.type for o in g.ops)


class Blocks(nn.Module):
    """One branch under ``torch.autocast`` (bf16), one under ``torch.enable_grad()``, which
    torch.export wraps each as one higher-order call of a nested graph."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = self.c(self.a(x).relu())
        with torch.enable_grad():
            self.steps.add_(1.0)
            b = self.b(x).tanh()
        return a.float() + b * self.steps


def test_autocast_and_grad_mode_blocks_are_imported_op_by_op():
    from parastream.graph.torch_import import import_runnable
    from parastream.plan.assign import assign
    from parastream.runtime.executor import MultiStreamExecutor

    torch.manual_seed(0)
    module, x = Blocks().eval(), torch.randn(4, 32)
    g = import_module(module, (x,), name="blocks")
    validate(g)
    assert len(by_type(g, "linear")) == 3  # the blocks' linears are ops, not one opaque call
    assert by_type(g, "_to_copy")           # autocast's casts, made explicit
    assert any("writes:steps" in o.side_effects for o in g.ops)
    with torch.no_grad():
        want = Blocks().eval()
        want.load_state_dict(module.state_dict())
        expected = [want(x) for _ in range(2)]
    rn = import_runnable(module, (x,), name="blocks")
    plan = assign(rn.graph, "matching", max_streams=2)
    assert plan.stream_count() == 2
    with MultiStreamExecutor(module, (x,), plan, runnable=rn) as ex:
        got = [ex(x) for _ in range(2)]  # the step counter lands in the buffer each call
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    assert torch.equal(module.steps, want.steps)


class Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.a(x) + torch.rand(x.shape), self.drop(self.b(x) * torch.randn_like(x))


def test_random_draws_keep_program_order_and_run_bitwise_on_streams():
    """Every draw advances one generator: draws on two branches are ordered by state edges,
    so a multi-stream run takes the same numbers as single stream, and the check starts
    each call from the same generator state."""
    from parastream.graph.torch_import import import_runnable
    from parastream.plan.assign import assign
    from parastream.runtime.executor import Jitter, MultiStreamExecutor

    module, x = Noisy().train(), torch.randn(4, 16)
    g = import_module(module, (x,), name="noisy")
    draws = [o.name for o in g.ops if "writes:random generator (cpu)" in o.side_effects]
    assert len(draws) == 3  # rand, randn_like, the training dropout
    for a, b in zip(draws, draws[1:]):
        assert reaches(g, a, b)
    rn = import_runnable(module, (x,), name="noisy")
    plan = assign(rn.graph, "matching", max_streams=2)
    assert len({plan.assignment[d] for d in draws}) == 2  # draws on both streams
    with MultiStreamExecutor(module, (x,), plan, runnable=rn, jitter=Jitter(seed=3)) as ex:
        cmp = ex.check(x, runs=30)
    assert cmp.ok, cmp.describe()


def test_attention_without_dropout_draws_nothing():
    """scaled_dot_product_attention is tagged as seeded (for its dropout); at dropout_p=0
    it draws nothing, and two attentions stay independent."""
    class TwoAttn(nn.Module):
        def forward(self, q, k):
            f = torch.nn.functional.scaled_dot_product_attention
            return f(q, q, q), f(k, k, k), f(q, k, k, dropout_p=0.5)

    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    g = import_module(TwoAttn(), (q, k), name="attn")
    effects = {o.name: o.side_effects for o in g.ops}
    drawing = [n for n, e in effects.items() if any("random generator" in x for x in e)]
    assert len(drawing) == 1 and len(g.ops) == 3  # the one with dropout_p=0.5
    assert not any(e.type == "state" for e in g.edges)


def test_a_lowered_program_writes_the_input_back_as_eager_mode_does():
    """With an autocast block the program is lowered to functional form; the executor still
    leaves an input written in place (x.mul_) as eager mode leaves it."""
    from parastream.graph.torch_import import import_runnable
    from parastream.plan.assign import assign
    from parastream.runtime.executor import MultiStreamExecutor

    class WritesInput(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = self.a(x)
            x.mul_(2.0)
            return y.float() + x

    torch.manual_seed(0)
    module, x = WritesInput().eval(), torch.randn(2, 8)
    x_eager = x.clone()
    with torch.no_grad():
        want = module(x_eager)
    rn = import_runnable(module, (x.clone(),), name="writes_input")
    assert rn.input_writes
    with MultiStreamExecutor(module, (x,), assign(rn.graph, "matching", max_streams=2),
                             runnable=rn) as ex:
        got = ex(x)
    assert torch.equal(got, want) and torch.equal(x, x_eager)


class _ReadViewThenWrite(nn.Module):
    """A view read, then its base written: a write-after-read the planner must order."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def forward(self, x):
        y = x * 1.0
        if self.how == "unfold":
            v = y.unfold(0, 4, 4)
        elif self.how == "tensor_split":
            v = torch.tensor_split(y, 2)[0]
        else:
            v = y
        r = torch.tanh(v)
        if self.how == "out":
            torch.add(x, 100.0, out=y)  # an out= keyword after an omitted default (alpha)
        else:
            y.add_(100.0)
        return r, y


@pytest.mark.parametrize("how", ["unfold", "tensor_split", "out"])
def test_a_write_after_a_read_through_any_view_is_ordered(how):
    # a run audit: unfold and tensor_split results were taken for copies, and an out=
    # keyword was matched to the wrong schema position: no state edge, racy plans validated
    g = import_module(_ReadViewThenWrite(how).eval(), (torch.randn(64, 8),))
    names = [o.name for o in g.ops]
    writer = next(n for n in names if n.startswith("add"))
    assert ("tanh", writer, "state") in [(e.src, e.dst, e.type) for e in g.edges], g.edges
    assert not any(n.startswith(("unfold", "tensor_split")) for n in names)


def test_a_cast_that_copies_is_an_op_and_one_that_does_not_is_folded():
    class Casts(nn.Module):
        def forward(self, x):
            return x.to(torch.float64).sum() + x.to(torch.float32).sum() + x.t().contiguous().sum()

    g = import_module(Casts().eval(), (torch.randn(8, 4),))
    types = [o.type for o in g.ops]
    assert types.count("to") == 1 and "contiguous" in types  # the float64 cast, the copy


class LayoutCopies(nn.Module):
    """contiguous/to in another memory format copy, then the source is written."""

    def __init__(self) -> None:
        super().__init__()
        self.c, self.d = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        h = self.c(x)
        cl = h.contiguous(memory_format=torch.channels_last)
        cl2 = h.to(memory_format=torch.channels_last)
        h.add_(100.0)
        return self.d(cl) + cl2, h


def test_a_memory_format_change_is_a_copy_not_a_view():
    g = import_module(LayoutCopies(), (torch.randn(1, 4, 6, 6),), name="layout")
    copies = [o for o in g.ops if o.resource == "memory" and o.type != "add_"]
    assert len(copies) == 2, [o.type for o in g.ops]  # both copies are ops of their own
    add_ = by_type(g, "add_")[0]
    for c in copies:  # and read h before add_ writes it
        assert reaches(g, c.name, add_.name)


class TransposeInPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        h.transpose_(0, 1)
        return torch.tanh(self.b(h)) + torch.sigmoid(self.c(h))


def test_transpose_in_place_is_an_op_its_readers_follow():
    """Folded as a view, it ran where each stream first read h: twice on two streams."""
    g = import_module(TransposeInPlace(), (torch.randn(8, 8),), name="tr_")
    t = by_type(g, "transpose_")
    assert len(t) == 1
    for lin in (o for o in g.ops if o.module in ("b", "c")):
        assert reaches(g, t[0].name, lin.name)


class ViewThenT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        v = h[0]
        h.t_()
        return v * 2, h.sum()


def test_a_view_taken_before_its_base_changes_layout_in_place_is_taken_by_that_op():
    """Views run where first read; v = h[0] read after h.t_() would be a column. The t_
    takes it first, as eager mode does, and the view's reader follows the t_."""
    g = import_module(ViewThenT(), (torch.randn(4, 8),), name="vt")
    t = by_type(g, "t_")[0]
    assert t.meta["views_before"] == ["select"] and t.meta["views"] >= 1
    mul = by_type(g, "mul")[0]
    assert "views" not in mul.meta  # the view is not taken again by its reader
    assert reaches(g, t.name, mul.name)


class AliasedBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        base = torch.randn(4, 16)
        self.register_buffer("full", base)
        self.register_buffer("row", base[0])  # the same memory as full's first row
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        p = torch.tanh(self.a(x + self.row))
        self.full.mul_(0.5)
        return p + self.b(x * self.row)


def test_buffers_that_share_memory_are_ordered_as_one():
    g = import_module(AliasedBuffers(), (torch.randn(4, 16),), name="alias")
    write = by_type(g, "mul_")[0]
    first, later = by_type(g, "add")[0], by_type(g, "mul")[0]
    assert reaches(g, first.name, write.name)   # the read of row before the write of full
    assert reaches(g, write.name, later.name)   # and the one after it


class SplitCache(nn.Module):
    """k and v caches registered as the two halves of one tensor: one storage, no bytes
    in common."""

    def __init__(self, whole: bool = False) -> None:
        super().__init__()
        cache = torch.zeros(2, 4, 8)
        if whole:  # the whole tensor too: it overlaps both halves
            self.register_buffer("cache", cache)
        self.register_buffer("k", cache[0])
        self.register_buffer("v", cache[1])
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        self.k.copy_(self.a(x))
        self.v.copy_(self.b(x))
        return self.k.sum() + self.v.sum()


def test_views_of_one_storage_that_do_not_overlap_stay_apart():
    from parastream.graph.torch_import import _shared_memory

    names = {"cache", "k", "v", "a.weight", "a.bias", "b.weight", "b.bias"}
    assert _shared_memory(SplitCache(), names) == {}
    assert _shared_memory(SplitCache(whole=True), names) == {"k": "cache", "v": "cache"}
    g = import_module(SplitCache(), (torch.randn(4, 8),), name="split")
    kw, vw = by_type(g, "copy_")
    assert not reaches(g, kw.name, vw.name) and not reaches(g, vw.name, kw.name)
