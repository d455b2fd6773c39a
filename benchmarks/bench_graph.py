"""Benchmark: decomposition and headroom of a 10,000-op graph (target: under 1 s).

    .venv/bin/python benchmarks/bench_graph.py [--ops 10000] [--device ascend910b] [--repeat 3]

Builds a stack of alternating LLaMA-like decoder layers and DeepSeek-like MoE layers from
``tests/graph/shapes.py`` until it has at least ``--ops`` ops, writes it as graph JSON, and
times each stage (best of ``--repeat``): JSON load + validate, cost + decomposition +
headroom (``analyze_graph``: the number the target is about), and each renderer.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "graph"))

import shapes  # noqa: E402

from parastream.device import load_profile  # noqa: E402
from parastream.graph.headroom import analyze_graph  # noqa: E402
from parastream.graph.ir import dumps, loads  # noqa: E402
from parastream.report.graph import (analysis_document, render_json, render_md,  # noqa: E402
                                     render_text)


def best(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--device", default="ascend910b")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    per_pair = len(shapes.stack(2, "mixed").ops)
    g = shapes.stack(2 * -(-args.ops // per_pair), "mixed")
    data = dumps(g)
    profile = load_profile(args.device)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        f.write(data)
    t_load, g2 = best(lambda: loads(open(f.name, "rb").read()), args.repeat)
    os.unlink(f.name)
    t_an, a = best(lambda: analyze_graph(g2, profile), args.repeat)
    d = a.decomposition
    t_json, _ = best(lambda: render_json(analysis_document(a, g2, profile)), args.repeat)
    t_md, _ = best(lambda: render_md(a, g2, profile), args.repeat)
    t_text, _ = best(lambda: render_text(a, g2, profile), args.repeat)
    print(f"graph: {len(g2.ops)} ops, {len(g2.edges)} edges, {len(data) / 1e6:.1f} MB JSON")
    print(f"result: {len(d.modules)} modules, {len(d.module_edges)} module edges, "
          f"{len(d.parallel_points)} parallel points, bound {a.headroom.bound_speedup:.2f}x")
    print(f"load + validate JSON        {t_load:7.3f} s")
    print(f"cost + decompose + headroom {t_an:7.3f} s   (target < 1 s)")
    print(f"render json                 {t_json:7.3f} s")
    print(f"render md                   {t_md:7.3f} s")
    print(f"render text                 {t_text:7.3f} s")


if __name__ == "__main__":
    main()
