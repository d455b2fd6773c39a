"""What one decode forward costs on a device, from the discrete-event device model.

A *forward* is one model call over some requests: a batched decode step (one new token per
request, attending to its whole context), a prefill (every prompt position), or one
request's step on its own stream (``streams`` mode: one :class:`Work` per request, each on
its own stream). Its work becomes device tasks per layer, priced by the device profile's
cost model (:func:`parastream.device.cost.estimate`: cube and vector cores, HBM
bandwidth) and run by the simulator's engine (:func:`parastream.sim.engine.simulate`:
hardware queues, cores, shared bandwidth, the host's launch per op in eager mode or one
captured graph in graph mode).

Per layer, in fp16: ``norm`` (vector), ``qkv`` (cube: the Q/K/V projection, its weights
read once per forward), ``rope`` (vector: rotary embedding and the KV-cache write),
``attention`` (cube: query-key pairs of the new tokens, the context's keys and values
read), ``o_proj`` (cube), ``add_norm`` (vector), ``gate_up`` and ``down`` (cube: the SwiGLU
projections), ``silu_mul`` and ``add`` (vector); then ``final_norm``, ``lm_head`` (cube,
one row per request) and ``sample`` (vector). Decode is bandwidth-bound: a batched step
reads the weights once for all its requests, each request's own step reads them again.

Two micro-batches (``two_micro``): the forward's requests split in two halves on two
streams, staggered so one half's attention runs beside the other's MLP; each half reads
the weights on its own.

The model has ``layers`` identical layers: a forward is simulated with :data:`PROBE`
layers and with one more, and the difference (one layer in steady state) is counted for
the rest. Work sizes are rounded (relative: :data:`TOKEN_GRAIN`, :data:`GRAIN`) so that
forwards of nearly the same size share one simulation (:class:`StepCosts` keeps them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..device.cost import estimate
from ..device.profile import DeviceProfile
from ..sim.engine import Task, simulate
from ..sim.run import device_of, require_mode

#: bytes of one fp16 value (weights, activations, keys and values)
FP16 = 2
#: layers simulated for the first estimate (the next one gives the per-layer slope)
PROBE = 1
#: relative rounding of work sizes before simulating (forwards within it share a
#: result): new tokens (the matmuls' work) finely, the attention's pairs and context
#: (a small share of a step at decode) coarsely
TOKEN_GRAIN = 0.02
GRAIN = 0.1
#: counts at or below this are kept exact
EXACT = 64


@dataclass(frozen=True)
class Work:
    """One micro-batch's (or one request's) part of a forward: ``tokens`` new positions
    computed, ``rows`` requests (each gives one logit row), ``pairs`` query-key pairs its
    attention computes and ``context`` positions of keys and values it reads."""

    tokens: int
    rows: int
    pairs: int
    context: int

    def rounded(self) -> "Work":
        """The same work at :data:`TOKEN_GRAIN` / :data:`GRAIN` resolution (the cache
        key)."""
        return Work(_round(self.tokens, TOKEN_GRAIN), self.rows, _round(self.pairs, GRAIN),
                    _round(self.context, GRAIN))

    def __add__(self, other: "Work") -> "Work":
        return Work(self.tokens + other.tokens, self.rows + other.rows,
                    self.pairs + other.pairs, self.context + other.context)


def total(work: list[Work]) -> Work:
    """The work of every item of ``work`` together."""
    return Work(sum(w.tokens for w in work), sum(w.rows for w in work),
                sum(w.pairs for w in work), sum(w.context for w in work))


def decode_work(contexts: list[int]) -> Work:
    """A batched decode step of requests whose caches hold ``contexts`` positions each
    (the new token attends to them and to itself)."""
    return Work(len(contexts), len(contexts), sum(c + 1 for c in contexts),
                sum(contexts))


def prefill_work(prompts: list[int]) -> Work:
    """A batched prefill of ``prompts`` (positions each; causal attention)."""
    return Work(sum(prompts), len(prompts), sum(p * (p + 1) // 2 for p in prompts), 0)


def chunk_work(start: int, stop: int, final: bool) -> Work:
    """A chunk of a prefill: positions ``start .. stop-1`` over a cache of ``start``
    (the last chunk gives a logit row)."""
    return Work(stop - start, int(final), (stop * (stop + 1) - start * (start + 1)) // 2,
                start)


def split_two(work: list[Work]) -> tuple[Work, Work] | None:
    """The two micro-batches of a forward over ``work`` (one item per request): requests
    dealt largest first to the lighter half; a single request's prefill (or chunk) is
    split at its middle position. None when there is nothing to split (one token)."""
    if len(work) == 1:
        w = work[0]
        if w.tokens < 2:
            return None
        start, mid = w.context, w.context + w.tokens // 2
        return (chunk_work(start, mid, False),
                replace(chunk_work(mid, start + w.tokens, False), rows=w.rows))
    halves = [Work(0, 0, 0, 0), Work(0, 0, 0, 0)]
    for w in sorted(work, key=lambda w: (w.tokens, w.pairs), reverse=True):
        k = 0 if (halves[0].tokens, halves[0].pairs) <= (halves[1].tokens, halves[1].pairs) else 1
        halves[k] = halves[k] + w
    return halves[0], halves[1]


def _round(n: int, grain: float) -> int:
    if n <= EXACT:
        return n
    step = math.log1p(grain)
    return int(round(math.exp(round(math.log(n) / step) * step)))


@dataclass(frozen=True)
class _Tensor:
    shape: tuple[int, ...]
    dtype: str = "float16"


@dataclass(frozen=True)
class _Op:
    """An op as :func:`parastream.device.cost.estimate` reads one (duck-typed)."""

    name: str
    resource: str
    flops: float
    bytes_read: int
    bytes_written: int
    outputs: tuple[_Tensor, ...]
    inputs: tuple = ()
    meta: None = None


def layer_ops(cfg: Any, w: Work) -> tuple[list[_Op], list[_Op]]:
    """One layer's ops for ``w`` at the shapes of ``cfg`` (a decoder config): the
    attention part (norm .. attention) and the rest (o_proj .. add)."""
    t, d, f = w.tokens, cfg.dim, cfg.ffn
    kvd = cfg.kv_heads * (cfg.dim // cfg.heads)
    qkv = d + 2 * kvd

    def gemm(name: str, k: int, n: int) -> _Op:
        return _Op(name, "cube", 2.0 * t * k * n, FP16 * (k * n + t * k), FP16 * t * n,
                   (_Tensor((t, n)),))

    def vector(name: str, width: int, passes: int) -> _Op:
        return _Op(name, "vector", 4.0 * t * width, FP16 * t * width * (passes - 1),
                   FP16 * t * width, (_Tensor((t, width)),))

    attention = _Op("attention", "cube", 4.0 * cfg.dim * w.pairs,
                    FP16 * (2 * kvd * w.context + t * qkv), FP16 * t * d, (_Tensor((t, d)),))
    first = [vector("norm", d, 2), gemm("qkv", d, qkv), vector("rope", qkv, 3), attention]
    rest = [gemm("o_proj", d, d), vector("add_norm", d, 3), gemm("gate_up", d, 2 * f),
            vector("silu_mul", f, 3), gemm("down", f, d), vector("add", d, 3)]
    return first, rest


def head_ops(cfg: Any, w: Work) -> list[_Op]:
    """The ops after the last layer: the final norm, the LM head and greedy sampling
    (one row per request)."""
    r = max(1, w.rows)
    return [_Op("final_norm", "vector", 4.0 * r * cfg.dim, FP16 * 2 * r * cfg.dim,
                FP16 * r * cfg.dim, (_Tensor((r, cfg.dim)),)),
            _Op("lm_head", "cube", 2.0 * r * cfg.dim * cfg.vocab,
                FP16 * (cfg.dim * cfg.vocab + r * cfg.dim), FP16 * r * cfg.vocab,
                (_Tensor((r, cfg.vocab)),)),
            _Op("sample", "vector", 2.0 * r * cfg.vocab, FP16 * r * cfg.vocab, 8 * r,
                (_Tensor((r, 1)),))]


@dataclass(frozen=True)
class Forward:
    """A forward's simulated cost (us): the device's wall from the host's first launch to
    the last task, and the host's time launching it (every op in eager mode, one graph in
    graph mode)."""

    wall_us: float
    launch_us: float
    tasks: int


class _Tasks:
    """Tasks in the host's issue order, each stream a FIFO (engine tasks), priced once
    per distinct op."""

    def __init__(self, profile: DeviceProfile) -> None:
        self.profile = profile
        self.tasks: list[Task] = []
        self._cost: dict[_Op, Any] = {}

    def add(self, ops: list[_Op], stream: int, waits: list[int] | None = None) -> int:
        """Issue ``ops`` on ``stream`` (the first waits for ``waits``); the last's index."""
        for k, op in enumerate(ops):
            c = self._cost.get(op)
            if c is None:
                c = self._cost[op] = estimate(op, self.profile)
            self.tasks.append(Task(op.name, stream, c.dur_us, c.unit, c.block_dim,
                                   c.bound == "memory", list(waits or ()) if k == 0 else [],
                                   op.name))
        return len(self.tasks) - 1


def _streams_tasks(cfg: Any, profile: DeviceProfile, works: list[Work],
                   layers: int) -> list[Task]:
    """Each work on its own stream (``works[i]`` on stream ``i``), issued op by op across
    the streams (the host launches one op for every stream, then the next)."""
    per_stream = []
    for w in works:
        first, rest = layer_ops(cfg, w)
        per_stream.append((first + rest) * layers + head_ops(cfg, w))
    out = _Tasks(profile)
    for k in range(len(per_stream[0])):
        for s, ops in enumerate(per_stream):
            out.add([ops[k]], s)
    return out.tasks


def _two_micro_tasks(cfg: Any, profile: DeviceProfile, a: Work, b: Work,
                     layers: int) -> list[Task]:
    """Two micro-batches on streams 0 and 1, staggered by half a layer: ``b``'s attention
    part of layer l waits for ``a``'s, and ``a``'s attention part of layer l+1 waits for
    ``b``'s of layer l, so one half's attention runs beside the other's MLP."""
    out = _Tasks(profile)
    fa, ra = layer_ops(cfg, a)
    fb, rb = layer_ops(cfg, b)
    a_attn = out.add(fa, 0)
    b_attn = out.add(fb, 1, [a_attn])
    for layer in range(layers):
        out.add(ra, 0)
        if layer + 1 < layers:
            a_attn = out.add(fa, 0, [b_attn])
        b_last = out.add(rb, 1)
        if layer + 1 < layers:
            b_attn = out.add(fb, 1, [a_attn])
    out.add(head_ops(cfg, a + b), 0, [b_last])
    return out.tasks


class StepCosts:
    """Simulated forwards of one decoder config on one device profile in one launch mode
    (``eager``: the host launches every op; ``graph``: one captured graph per forward and
    stream), kept by their rounded work."""

    def __init__(self, cfg: Any, profile: DeviceProfile, launch: str = "eager") -> None:
        require_mode(profile, launch)
        self.cfg, self.profile, self.launch = cfg, profile, launch
        self.device = device_of(profile, launch)
        self._seen: dict[tuple, Forward] = {}

    def batched(self, work: list[Work], two_micro: bool = False) -> Forward:
        """One forward over every item of ``work`` together (on two micro-batches when
        ``two_micro`` and there is something to split)."""
        halves = split_two(work) if two_micro else None
        if halves is None:
            return self._forward(("one", total(work).rounded()))
        return self._forward(("two", halves[0].rounded(), halves[1].rounded()))

    def streams(self, work: list[Work]) -> Forward:
        """Each item of ``work`` on its own stream at once (each costed at the mean work,
        rounded): the streams beyond the device's hardware queues share them. Past the
        queues every further stream adds its work to a queue that is already full, so a
        round of more streams than queues is the round of one stream per queue scaled
        by the streams."""
        n = len(work)
        whole = total(work)
        mean = Work(-(-whole.tokens // n), 1, -(-whole.pairs // n), whole.context // n)
        queues = max(1, self.profile.hw_queues)
        one = self._forward(("streams", min(n, queues), mean.rounded()))
        if n <= queues:
            return one
        scale = n / queues
        return Forward(one.wall_us * scale, one.launch_us * scale, round(one.tasks * scale))

    def _forward(self, key: tuple) -> Forward:
        hit = self._seen.get(key)
        if hit is None:
            hit = self._seen[key] = self._simulate(key)
        return hit

    def _tasks(self, key: tuple, layers: int) -> list[Task]:
        kind = key[0]
        if kind == "one":
            return _streams_tasks(self.cfg, self.profile, [key[1]], layers)
        if kind == "two":
            return _two_micro_tasks(self.cfg, self.profile, key[1], key[2], layers)
        return _streams_tasks(self.cfg, self.profile, [key[2]] * key[1], layers)

    def _simulate(self, key: tuple) -> Forward:
        """The forward of ``key`` with :data:`PROBE` layers and one more, extended to the
        model's layers by the per-layer difference."""
        walls, counts = [], []
        for layers in (PROBE, PROBE + 1):
            tasks = self._tasks(key, layers)
            res = simulate(tasks, self.device, name="decode forward",
                           shared_pool=self.profile.shared_cores)
            walls.append(res.wall_us)
            counts.append(len(tasks))
        rest = self.cfg.layers - PROBE
        wall = walls[0] + rest * max(0.0, walls[1] - walls[0])
        tasks = counts[0] + rest * (counts[1] - counts[0])
        graphs = key[1] if key[0] == "streams" else 1
        if self.launch == "graph":
            # one replay per captured graph: the host's launch, before the device starts
            launch = graphs * self.profile.launch_overhead_us
            wall += launch
        else:
            launch = tasks * self.profile.launch_overhead_us
        return Forward(wall, launch, tasks)


__all__ = ["Forward", "StepCosts", "Work", "chunk_work", "decode_work", "head_ops", "layer_ops",
           "prefill_work", "split_two", "total"]
