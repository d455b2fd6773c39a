"""Per op type CPU costs for the cpu profile's ``op_rates``: each op type timed at two
(or three) sizes on one intra-op thread and on all cores, a line through the sizes; and
what an op pays when its code and data have gone cold (``cold_*``, ``cold_after_us``,
``cold_curve``)."""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any, Callable, Sequence

from .busy import cpu_count
from ..calibrate.profile import sig
from .timing import _median_time, _nbytes, _on_executor_thread


#: an op case built: (the call, its work, the bytes it reads)
_Case = tuple[Callable[[], Any], float, float]


def _torch_fns() -> tuple[Any, Any, Callable[..., Any]]:
    """(torch, torch.nn.functional, torch.randn), imported when a case is built."""
    import torch
    import torch.nn.functional as F

    return torch, F, torch.randn


def _case_linear(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    m, k, n = (256, 512, 512) if large else (16, 64, 64)
    x, w = r(m, k), r(n, k)
    return (lambda: F.linear(x, w)), 2.0 * m * k * n, float(_nbytes(x, w))


def _case_few_rows(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # a batch-2 decode linear (up to FEW_ROWS rows): about one pass over the weight
    # per row, at a fraction of the FLOP rate of bigger products
    k = n = 512 if large else 64
    x, w = r(2, k), r(n, k)
    return (lambda: F.linear(x, w)), 2.0 * 2 * k * n, float(_nbytes(x, w))


def _case_conv2d(large: bool, channels_last: bool = False) -> _Case:
    torch, F, r = _torch_fns()
    # channels_last: the same convolution on NHWC data (an image permuted from HWC,
    # and everything convolved from it), which oneDNN runs faster
    nb, c, hw, o, ks = (2, 64, 28, 64, 3) if large else (1, 8, 8, 8, 3)
    x, w, b = r(nb, c, hw, hw), r(o, c, ks, ks), r(o)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out = nb * o * hw * hw
    return ((lambda: F.conv2d(x, w, b, padding=1)), 2.0 * out * c * ks * ks + out,
            float(_nbytes(x, w, b)))


def _case_sdpa(large: bool, mixed: bool = False) -> _Case:
    torch, F, r = _torch_fns()
    # mixed: v's head dim below q's (MLA's decoupled rope): the unfused math kernel
    b, h, L, e, ev = ((2, 8, 128, 48, 32) if large else (1, 4, 16, 16, 8)) if mixed \
        else ((2, 8, 128, 64, 64) if large else (1, 4, 16, 16, 16))
    q, k, v = r(b, h, L, e), r(b, h, L, e), r(b, h, L, ev)
    return (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), \
        2.0 * b * h * L * L * (e + ev), float(_nbytes(q, k, v))


def _case_max_pool2d(large: bool, channels_last: bool = False) -> _Case:
    torch, F, r = _torch_fns()
    # channels_last: the same pool on NHWC data (an image permuted from HWC), another
    # kernel, much faster, for ops the importer marks memory_format=channels_last
    x = r(4, 64, 56, 56) if large else r(1, 8, 14, 14)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    out = F.max_pool2d(x, 3, 2, 1)
    # a 3x3 window each
    return (lambda: F.max_pool2d(x, 3, 2, 1)), 9.0 * out.numel(), float(_nbytes(x))


def _case_rms_norm(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    d = 512 if large else 64
    x, w = r(2 if large else 1, 128 if large else 16, d), r(d)
    return (lambda: F.rms_norm(x, (d,), w)), float(2 * _nbytes(x) + _nbytes(w)), \
        float(_nbytes(x, w))


def _case_layer_norm(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    d = 512 if large else 64
    x, w, b = r(2 if large else 1, 128 if large else 16, d), r(d), r(d)
    return (lambda: F.layer_norm(x, (d,), w, b)), float(2 * _nbytes(x) + _nbytes(w, b)), \
        float(_nbytes(x, w, b))


def _case_softmax(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    x = r(16, 128, 128) if large else r(4, 128, 128)
    return (lambda: torch.softmax(x, -1)), float(2 * _nbytes(x)), float(_nbytes(x))


def _case_add(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    a, b = (r(2, 128, 1376), r(2, 128, 1376)) if large else (r(1, 128, 512), r(1, 128, 512))
    return (lambda: torch.add(a, b)), float(3 * _nbytes(a)), float(_nbytes(a, b))


def _case_silu(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    x = r(2, 128, 1376) if large else r(1, 128, 512)
    return (lambda: F.silu(x)), float(2 * _nbytes(x)), float(_nbytes(x))


def _case_add_channels_last_broadcast(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # an image normalisation, (x - mean) on NHWC data with 3 channels: the broadcast
    # along a 3-element innermost dim leaves TensorIterator no vector loop, many times
    # slower than the same sub on NCHW data
    x = r(4, 3, 112, 112) if large else r(1, 3, 64, 64)
    x = x.contiguous(memory_format=torch.channels_last)
    m = r(1, 3, 1, 1)
    return (lambda: torch.add(x, m)), float(2 * _nbytes(x) + _nbytes(m)), \
        float(_nbytes(x, m))


def _case_topk(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # top-k over the last dim (a vocabulary or experts' scores): several times an
    # element-wise op over the same bytes, so the add line would make it near free
    x = r(16, 8000) if large else r(2, 1000)
    out = torch.topk(x, 8, dim=-1)
    return (lambda: torch.topk(x, 8, dim=-1)[0]), float(_nbytes(x, *out)), float(_nbytes(x))


def _case_index_select(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # rows gathered from a table (rotary cos/sin by position, experts' tokens)
    table, idx = (r(2048, 128), torch.randint(0, 2048, (256,))) if large \
        else (r(128, 16), torch.randint(0, 128, (16,)))
    out = torch.index_select(table, 0, idx)
    # as the importer counts a gather: the rows it returns, not the whole table
    return (lambda: torch.index_select(table, 0, idx)), float(_nbytes(idx, out, out)), \
        float(_nbytes(idx, out))


def _case_cat(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    a, b = (r(4, 64, 28, 28), r(4, 128, 28, 28)) if large else (r(1, 32, 32, 32), r(1, 32, 32, 32))
    return (lambda: torch.cat([a, b], 1)), float(2 * _nbytes(a, b)), float(_nbytes(a, b))


def _case_all_reduce(large: bool) -> _Case:
    torch, F, r = _torch_fns()
    # the collective as this process runs it: the zoo's parastream::all_reduce with
    # one rank (a Python custom op that clones, far above what the bandwidth alone
    # gives). A group of several ranks costs
    # its link on top, which one process cannot measure
    from ..zoo import all_reduce as reduce

    x = r(2, 128, 512) if large else r(1, 16, 64)
    return (lambda: reduce(x)), float(2 * _nbytes(x)), float(_nbytes(x))


def _op_cases() -> dict[str, tuple[str, Callable[[bool], _Case]]]:
    """The op types whose CPU cost is measured: name -> (metric, case), where
    ``case(large)`` builds inputs and returns (the call, its work, the bytes it reads). Work
    and bytes read are counted the way
    the graph importer counts it (FLOPs of matmuls, convolutions and attention; bytes read
    plus written for the rest), so a rate applies to imported ops unchanged. The two sizes
    bracket the zoo's tiny and small scales, except that the element-wise, copy and softmax
    cases start above torch's intra-op grain (32Ki output elements): below it
    torch runs them on the calling thread, which the cost model costs on the one-thread
    line (:func:`parastream.cpu.cost.runs_serial`); a line through one serial and one
    multi-threaded point would put the thread team's fixed cost into the rate, and make
    a mid-sized op several times too cheap."""
    return {"linear": ("flops", _case_linear), "linear.few_rows": ("flops", _case_few_rows),
            "conv2d": ("flops", _case_conv2d),
            "conv2d.channels_last": ("flops", partial(_case_conv2d, channels_last=True)),
            "scaled_dot_product_attention": ("flops", _case_sdpa),
            "scaled_dot_product_attention.mixed_head_dims": ("flops",
                                                             partial(_case_sdpa, mixed=True)),
            "max_pool2d": ("flops", _case_max_pool2d),
            "max_pool2d.channels_last": ("flops",
                                         partial(_case_max_pool2d, channels_last=True)),
            "rms_norm": ("bytes", _case_rms_norm), "layer_norm": ("bytes", _case_layer_norm),
            "softmax": ("bytes", _case_softmax), "add": ("bytes", _case_add),
            "add.channels_last_broadcast": ("bytes", _case_add_channels_last_broadcast),
            "silu": ("bytes", _case_silu), "topk": ("bytes", _case_topk),
            "index_select": ("bytes", _case_index_select), "cat": ("bytes", _case_cat),
            "all_reduce": ("bytes", _case_all_reduce)}


def _third_cases() -> dict[str, _Case]:
    """A third size for the op types whose time is no straight line through their two
    cases (``OpRate.knee_work``): name -> (the call, its work, the bytes it reads).

    - ``conv2d`` in the middle: a convolution of 1.2 MFLOP (the zoo's tiny ones are
      0.3-1.2) runs at a fraction of the large case's rate on one thread, and the line
      through the small and large cases puts it well under its time. The
      same convolution on channels-last data for ``conv2d.channels_last``.
    - the element-wise, copy and softmax types below their small case, at 1Ki elements:
      their two cases are above torch's intra-op grain, and the line through them crosses
      zero at a fixed cost that moves from one calibration to the next, while a tiny
      element-wise op costs its own time inside a model."""
    import torch
    import torch.nn.functional as F

    r = torch.randn
    x, w, b = r(1, 16, 16, 16), r(16, 16, 3, 3), r(16)
    x_nhwc = x.contiguous(memory_format=torch.channels_last)
    out = 16 * 16 * 16
    a1, b1, c1, s1 = r(1, 1024), r(1, 1024), r(1, 1024), r(8, 128)
    p1, q1 = r(1, 8, 8, 8), r(1, 8, 8, 8)
    return {"conv2d": ((lambda: F.conv2d(x, w, b, padding=1)), 2.0 * out * 16 * 9 + out,
                       float(_nbytes(x, w, b))),
            "conv2d.channels_last": ((lambda: F.conv2d(x_nhwc, w, b, padding=1)),
                                     2.0 * out * 16 * 9 + out, float(_nbytes(x_nhwc, w, b))),
            "add": ((lambda: torch.add(a1, b1)), float(3 * _nbytes(a1)), float(_nbytes(a1, b1))),
            "silu": ((lambda: F.silu(c1)), float(2 * _nbytes(c1)), float(_nbytes(c1))),
            "softmax": ((lambda: torch.softmax(s1, -1)), float(2 * _nbytes(s1)),
                        float(_nbytes(s1))),
            "cat": ((lambda: torch.cat([p1, q1], 1)), float(2 * _nbytes(p1, q1)),
                    float(_nbytes(p1, q1)))}


#: a flat line's fixed part, as a share of its upper point's time (:func:`_fit`)
FLAT_SHARE = 0.99


def _fit(small: tuple[float, float], large: tuple[float, float],
         flat: bool = False) -> tuple[float, float]:
    """(fixed us, rate in G/s) of ``t = fixed + work / rate`` through two (work, us) points;
    the fixed part is clamped to [0, small time] and the rate then fits the large point.
    When the small point is no faster than the large one (noise), the line goes through
    the origin, or with ``flat`` stays at the large point's time (almost all fixed cost:
    a knee's low line, whose two cases both take about the per-call cost)."""
    (ws, ts), (wl, tl) = small, large
    if flat and not tl > ts:
        return FLAT_SHARE * tl, wl / (max((1 - FLAT_SHARE) * tl, 1e-3) * 1e3)
    fixed = ts - ws * (tl - ts) / (wl - ws) if tl > ts and wl > ws else 0.0
    fixed = min(max(fixed, 0.0), ts)
    return fixed, wl / (max(tl - fixed, 1e-3) * 1e3)


def rotation_times(calls: Sequence[tuple[Any, Callable[[], Any]]], passes: int) -> dict[Any, float]:
    """Median microseconds of each ``(key, call)`` timed once per pass over all of them,
    ``passes`` passes after an untimed one: as in a model, other ops run between two calls
    of one (:func:`measure_op_rates`' cold line; ``benchmarks/bench_cold_ops.py``)."""
    times: dict[Any, list[float]] = {key: [] for key, _ in calls}
    for _, fn in calls:
        fn()
    for _ in range(passes):
        for key, fn in calls:
            t0 = time.perf_counter()
            fn()
            times[key].append((time.perf_counter() - t0) * 1e6)
    return {key: statistics.median(ts) for key, ts in times.items()}


def measure_op_rates(quick: bool = False, rounds: int = 1) -> dict[str, dict]:
    """Measured cost of each op type in :func:`_op_cases`, on one intra-op thread and on
    all cores, as ``parastream.device/1`` ``op_rates`` entries (empty without torch).

    The ops run where the CPU stream backend runs them (:func:`_on_executor_thread`): on all
    cores on the calling thread, on one thread on a worker thread that set its own
    intra-op thread count. That matters: a multi-threaded op called from a thread other
    than the main one pays for waking its thread team each time (several times an
    element-wise op's own time). Every case is timed at two sizes and both thread counts,
    the median of a short burst, the median of ``rounds`` rounds; the line through the two
    sizes gives the fixed per-call cost and the rate. An op type with a third case
    (:func:`_third_cases`) gets two lines, through its lower two cases and through its
    upper two, meeting at the middle one (``knee_work``).

    The state is the executor's: the main thread's own thread team is alive first (it is
    in every ``parastream run``, whose single-stream reference runs there). Bursts catch
    a thread team spinning now and then (a fixed cost of nothing in one calibration and
    tens of microseconds in the next), which the lowest round would then keep; the median
    of the rounds does not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {}
    import torch

    cores = cpu_count()
    budget = 0.015 if quick else 0.05
    cases = {name: (metric, case(False), case(True)) for name, (metric, case) in _op_cases().items()}
    seen: dict[tuple[str, int, Any], list[float]] = {}
    torch.add(torch.ones(1 << 16), 1)  # the main thread's team, as in the executor's process

    calls = [((name, is_large), fn) for name, (_, small, large) in cases.items()
             for is_large, (fn, *_) in ((False, small), (True, large))]
    thirds = {name: third for name, third in _third_cases().items() if name in cases}

    def burst() -> dict[tuple[str, Any], float]:
        timed = calls + [((name, "third"), fn) for name, (fn, *_) in thirds.items()]
        return {key: _median_time(fn, budget, 5, 2000) * 1e6 for key, fn in timed}

    rotation = partial(rotation_times, calls, rotation_passes(quick))

    cold: dict[tuple[str, int, bool], list[float]] = {}
    for _ in range(rounds):
        for threads in sorted({1, cores}):
            for (name, is_large), t in _on_executor_thread(burst, threads,
                                                            "parastream-calibrate-ops").items():
                seen.setdefault((name, threads, is_large), []).append(t)
            for (name, is_large), t in _on_executor_thread(rotation, threads,
                                                            "parastream-calibrate-ops").items():
                cold.setdefault((name, threads, is_large), []).append(t)
    med = {key: statistics.median(ts) for key, ts in seen.items()}

    def line(name: str, lo: tuple[float, Any], hi: tuple[float, Any], prefix: str = "",
             flat: bool = False) -> dict[str, float]:
        """The fitted line through two (work, case key) points on one thread and on all
        cores, as ``<prefix>fixed_1_us`` ... ``<prefix>rate_all`` entries."""
        fits = {t: _fit((lo[0], med[name, t, lo[1]]), (hi[0], med[name, t, hi[1]]), flat)
                for t in (1, cores)}
        return {f"{prefix}fixed_1_us": sig(fits[1][0]),
                f"{prefix}fixed_all_us": sig(fits[cores][0]),
                f"{prefix}rate_1": sig(fits[1][1]), f"{prefix}rate_all": sig(fits[cores][1])}

    out = {}
    for name, (metric, small, large) in cases.items():
        # with a third case: the two lower points give the low line, the upper two the
        # main one (the same line as without it when the third is the lowest)
        third = thirds.get(name)
        sizes = sorted([(small[1], False), (large[1], True)]
                       + ([(third[1], "third")] if third else []), key=lambda p: p[0])
        out[name] = {"metric": metric, **line(name, sizes[-2], sizes[-1])}
        if third:
            out[name].update(knee_work=sig(sizes[1][0]),
                             **line(name, sizes[0], sizes[1], prefix="low_", flat=True))
        for suffix, t in (("1", 1), ("all", cores)):
            extra = [max(0.0, statistics.median(cold[name, t, big]) - med[name, t, big])
                     for big in (False, True)]
            fixed, gbps = cold_line(small[2], large[2], extra[0], extra[1])
            out[name][f"cold_{suffix}_us"] = sig(fixed)
            out[name][f"cold_gbps_{suffix}"] = sig(gbps)
    return out


def cold_line(read_small: float, read_large: float, extra_small: float,
              extra_large: float) -> tuple[float, float]:
    """(``cold_*_us``, ``cold_gbps_*``) of an op whose cold runs took ``extra_small`` /
    ``extra_large`` us more than its warm ones, reading ``read_small`` / ``read_large``
    bytes: the extra as a line in the bytes read, its value at none (the code gone cold)
    and the GB/s its slope stands for (the data gone cold too). An extra that does not grow
    with the bytes is all code: the small size's, and no cold GB/s (0)."""
    if read_large <= read_small or extra_large <= extra_small:
        return extra_small, 0.0
    us_per_byte = (extra_large - extra_small) / (read_large - read_small)
    return max(0.0, extra_small - us_per_byte * read_small), 1.0 / (us_per_byte * 1e3)


#: passes over all op cases when timing them in rotation (each pass runs every case once)
ROTATION_PASSES = 30


def rotation_passes(quick: bool) -> int:
    """Rotation passes a round of :func:`measure_op_rates` makes (a third in quick mode)."""
    return ROTATION_PASSES // (3 if quick else 1)


#: idle times (ms) after which :func:`measure_cold` times an op, other op cases (tiny and
#: small) running in between
IDLE_MS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


#: shorter idle times (ms), only tiny op cases running in between, as inside a small model:
#: the points of the profile's ``cold_curve``
SHORT_IDLE_MS = (0.05, 0.1, 0.25, 0.5)


#: the op cases whose cold ramp :func:`measure_cold` measures (a composite of several
#: kernels, a matmul, an element-wise op and a copy)
COLD_TARGETS = ("rms_norm", "linear", "add", "cat")


def measure_cold(reps: int = 9,
                 targets: Sequence[str] = COLD_TARGETS) -> tuple[float, list[list[float]]]:
    """How an op whose code has not run for a while pays its cold cost: (the profile's
    ``cold_after_us``, its ``cold_curve``); (0, []) without torch or when idling costs
    nothing.

    For each of ``targets`` (small cases of :func:`_op_cases`), where the executor runs
    an op on one intra-op thread and on all cores (:func:`_on_executor_thread`): the op
    back to back, then right after the other op cases, run in turn for at least each of
    :data:`IDLE_MS` (as in a model, other ops run between two of one type), the median of
    ``reps`` each, with the median idle really spent. Each curve gives the idle at which
    the op pays half its extra after the longest idle (:func:`cold_ramp_us`);
    ``cold_after_us`` is the median over targets and thread counts. (Not a Python spin
    that runs no other op: other ops evict more, and its ramp comes out longer.)

    The filler's small cases take a millisecond each, so those idles really last 0.5 ms
    and more. The curve's points come from the same op after :data:`SHORT_IDLE_MS` of the
    other families' tiny cases only: its extra there over its extra after the longest
    idle, the median over targets and thread counts at each idle, made non-decreasing
    (a ramp proportional to the idle under-states these short idles)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return 0.0, []
    cases = {name: (case(False)[0], case(True)[0]) for name, (_, case) in _op_cases().items()}

    def probe(name: str) -> tuple[float, list[tuple[float, float]], list[tuple[float, float]]]:
        target = cases[name][0]
        family = name.split(".", 1)[0]
        others = [fn for other, pair in cases.items() if other.split(".", 1)[0] != family
                  for fn in pair]
        tiny = [pair[0] for other, pair in cases.items() if other.split(".", 1)[0] != family]

        turn = [0]  # the filler goes on where it stopped: each idle starts with other ops

        def after(filler: list, ms: float) -> tuple[float, float]:
            """(median idle really spent, ms; median time of the op after it, us): the
            filler's ops only stop once the nominal idle has passed, so the real one is
            longer, by up to a case's time."""
            times, idles = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                end = t0 + ms / 1e3
                while time.perf_counter() < end:
                    filler[turn[0] % len(filler)]()
                    turn[0] += 1
                t1 = time.perf_counter()
                target()
                times.append(time.perf_counter() - t1)
                idles.append(t1 - t0)
            return statistics.median(idles) * 1e3, statistics.median(times) * 1e6

        return (_median_time(target, 0.05, 5, 2000) * 1e6, [after(others, ms) for ms in IDLE_MS],
                [after(tiny, ms) for ms in SHORT_IDLE_MS])

    ramps = []
    points: list[list[tuple[float, float]]] = [[] for _ in SHORT_IDLE_MS]
    for threads in sorted({1, cpu_count()}):
        for name in targets:
            hot, cold, short = _on_executor_thread(partial(probe, name), threads,
                                                   "parastream-calibrate-cold")
            longest = cold[-1][1] - hot  # the extra after the longest nominal idle
            cold.sort()
            ramps.append(cold_ramp_us([ms for ms, _ in cold], [t - hot for _, t in cold]))
            if longest >= 1.0:
                for k, (ms, t) in enumerate(short):
                    points[k].append((ms * 1e3, min(1.0, max(0.0, (t - hot) / longest))))
    ramps = [r for r in ramps if r > 0]
    if not ramps:
        return 0.0, []
    curve, share = [], 0.0
    for pts in points:
        if pts:
            share = max(share, statistics.median(s for _, s in pts))
            curve.append([sig(statistics.median(i for i, _ in pts)), sig(share, 3)])
    idles = [c[0] for c in curve]
    if idles != sorted(idles):  # a slow case stretched a short idle past a longer one
        curve = []
    return statistics.median(ramps), curve


def cold_ramp_us(idle_ms: Sequence[float], extra_us: Sequence[float]) -> float:
    """The ``cold_after_us`` of extra times ``extra_us`` measured after idle times
    ``idle_ms`` (ascending; equal ones allowed): twice the idle time, interpolated from
    0 us at 0 ms, at which the extra first reaches half the last one; 0 when the last extra
    is under 1 us (idling costs nothing measurable)."""
    extra = [max(0.0, e) for e in extra_us]
    if not extra or extra[-1] < 1.0:
        return 0.0
    half = extra[-1] / 2
    k = next(i for i, e in enumerate(extra) if e >= half)  # the last one at the latest
    prev_ms, prev = (idle_ms[k - 1], extra[k - 1]) if k else (0.0, 0.0)
    return 2e3 * (prev_ms + (idle_ms[k] - prev_ms) * (half - prev) / (extra[k] - prev))
