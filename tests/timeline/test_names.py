"""Readable names (parastream.timeline.names): properties over generated C++-like names and
arbitrary text, and the real kernel names of the Kineto traces in tests/data/kineto."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parastream.timeline.names import DEFAULT_LIMIT, ELLIPSIS, display_name, short_name

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"

IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


def _cxx(children) -> st.SearchStrategy[str]:
    """One C++-ish name part: a qualified identifier, with template arguments or a
    parameter list made of further parts."""
    args = st.lists(children, min_size=0, max_size=4).map(", ".join)
    return st.one_of(
        st.tuples(IDENT, IDENT).map("::".join),
        st.tuples(IDENT, args).map(lambda t: f"{t[0]}<{t[1]}>"),
        st.tuples(IDENT, args).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, IDENT).map(lambda t: f"{t[0]}::{t[1]}"),
        st.tuples(children, st.sampled_from(["*", "&", " const", " const&"])).map("".join),
    )


CXX = st.recursive(IDENT, _cxx, max_leaves=25)
#: a function's own name: qualified, maybe a template
FUNCTION = st.tuples(IDENT, IDENT, st.lists(CXX, max_size=3).map(", ".join)).map(
    lambda t: f"{t[0]}::{t[1]}<{t[2]}>" if t[2] else f"{t[0]}::{t[1]}")
SIGNATURE = st.tuples(st.sampled_from(["", "void ", "unsigned int ", "at::Tensor "]), FUNCTION,
                      st.lists(CXX, max_size=4).map(", ".join)).map(
    lambda t: f"{t[0]}{t[1]}({t[2]})")
ANY = st.text(alphabet=st.sampled_from(list("ab_:<>() ,*&-#{}\n…")), max_size=80)


def _balanced(s: str) -> bool:
    stack = []
    for ch in s:
        if ch in "<(":
            stack.append(ch)
        elif ch in ">)":
            if not stack or stack.pop() != {">": "<", ")": "("}[ch]:
                return False
    return not stack


def _check(name: str, limit: int = DEFAULT_LIMIT) -> str:
    out = short_name(name, limit)
    assert len(out) <= len(name)
    assert len(out) <= max(limit, 8)
    assert short_name(out, limit) == out, (name, out)
    assert (out != "") == (name != "")
    assert "\n" not in out
    return out


@settings(max_examples=400, deadline=None)
@given(st.one_of(CXX, SIGNATURE), st.integers(min_value=8, max_value=120))
def test_cxx_names_shorten_idempotently_and_stay_balanced(name, limit):
    assert _balanced(name)
    out = _check(name, limit)
    assert _balanced(out), (name, out)


@settings(max_examples=400, deadline=None)
@given(ANY, st.integers(min_value=1, max_value=90))
def test_any_text_is_never_longer_never_empty_and_idempotent(name, limit):
    _check(name, limit)


@settings(max_examples=200, deadline=None)
@given(SIGNATURE)
def test_a_signature_loses_its_parameter_list_and_return_type(name):
    out = short_name(name, 10_000)
    assert not out.endswith(")")
    assert not out.startswith(("void ", "unsigned int ", "at::Tensor "))


@pytest.mark.parametrize("name", [
    "aclnnCast_Cast", "hcom_allReduce__123_0_1", "MatMul", "aten::add",
    "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "ampere_sgemm_128x64_nn",
    "ProfilerStep#3", "autograd::engine::evaluate_function: AddBackward0",
])
def test_short_and_ascend_names_stay_as_they_are(name):
    assert short_name(name) == name


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3>)", "at::native::vectorized_elementwise_kernel<…>"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, "
     "float, float const*, float*)", "at::native::vectorized_layer_norm_kernel<float, float>"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
     "ncclDevKernel_AllGather_RING_LL"),
    ("void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)",
     "cask_cudnn::computeOffsetsKernel<false, false>"),
    ("foo::operator()(int) const", "foo::operator()"),
    ("bool std::operator< <int>(int const&, int const&)", "std::operator< <int>"),
])
def test_known_signatures(name, short):
    assert short_name(name) == short


def test_a_long_plain_name_keeps_its_head_and_tail():
    name = "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_" \
           "tensor16x8x16_kernel"
    out = short_name(name, 40)
    assert len(out) == 40 and ELLIPSIS in out
    head, tail = out.split(ELLIPSIS)
    assert name.startswith(head) and name.endswith(tail) and len(tail) > len(head)


def test_full_mode_keeps_the_name():
    name = "void k<int>(float*)"
    assert display_name(name, "full") == name
    assert display_name(name, "short") == "k<int>"
    assert display_name("a\nb", "full") == "a b"


def _kernel_names() -> set[str]:
    names = set()
    for f in sorted(DATA.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        names |= {e["name"] for e in doc["traceEvents"]
                  if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cpu_op")}
    return names


def test_real_kernel_names():
    names = _kernel_names()
    assert max(len(n) for n in names) > 1000  # the 5 kB template kernel of alexnet
    for name in names:
        out = _check(name)
        assert _balanced(out) or not _balanced(name), (name, out)
        if name.startswith("void "):
            assert not out.startswith("void ") and not out.endswith(")")
        if len(name) <= DEFAULT_LIMIT and "(" not in name and "<" not in name:
            assert out == name
