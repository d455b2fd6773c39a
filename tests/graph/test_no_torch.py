"""Everything but model import and the zoo works without torch: load a graph JSON, cost it,
decompose it, bound it, and run ``parastream graph --format json`` with torch hidden."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import shapes
from parastream.graph.ir import dumps


def test_graph_layer_without_torch(tmp_path):
    f = tmp_path / "dec.json"
    f.write_bytes(dumps(shapes.decoder_layer()))
    code = textwrap.dedent(f"""
        import io, json, sys, contextlib
        sys.modules["torch"] = None  # any 'import torch' now fails
        from parastream.device import load_profile, estimate, with_cores, list_profiles
        from parastream.graph.ir import loads
        from parastream.graph.decompose import decompose
        from parastream.graph.headroom import analyze_graph
        from parastream.report.graph import render_md, render_text
        from parastream.cli import main

        g = loads(open({str(f)!r}, "rb").read())
        for name in list_profiles():
            p = load_profile(name)
            a = analyze_graph(g, p)
            assert a.decomposition.modules and a.headroom.work_us > 0
            render_md(a, g, p); render_text(a, g, p)
            with_cores(estimate(g.ops[1], p), p, 1)
        decompose(g, load_profile("h100"))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["graph", {str(f)!r}, "--format", "json"])
        assert rc == 0
        doc = json.loads(buf.getvalue())
        assert doc["headroom"]["bound_speedup"] < 1.1
        assert sys.modules["torch"] is None
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_calibrate_and_demo_without_torch(tmp_path):
    # a docs audit: calibrate without torch measured for 16 s and then refused its own
    # profile (bf16 rate 0); demo died with ModuleNotFoundError
    out = tmp_path / "nt.json"
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        from parastream.cli import main
        sys.exit(main(["calibrate", "--quick", "-o", {str(out)!r}]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    from parastream.device.profile import load_profile

    p = load_profile(str(out))
    assert "bf16" not in p.peak_tflops["cube"] and p.peak_tflops["cube"]["fp32"] > 0
    assert "no torch" in p.sources["peak_tflops"]
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        from parastream.cli import main
        sys.exit(main(["demo", "--out", {str(tmp_path / "demo")!r}]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "needs torch" in r.stderr and not (tmp_path / "demo").exists()
