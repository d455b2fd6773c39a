"""Write the seed's worked example as Ascend kernel_details.csv files.

- ``seed_multi_stream/kernel_details.csv``: the MoE gate/top-k moved to stream 7, but GE
  issued the cheap precompute of its output (Cast+Swish) on the main stream ahead of the
  dominator in_proj_qkv, so main idles while the side stream runs: false parallelism.
- ``seed_single_stream/kernel_details.csv``: the same ops, all on stream 2 (the baseline).

Run ``python examples/make_seed_example.py`` to regenerate them; the test
``tests/timeline/test_seed_example.py`` builds the same rows.
"""

from __future__ import annotations

from pathlib import Path

BASE_US = 1736413971550000  # epoch microseconds, as the profiler writes them
HEADER = ("Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
          "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,Input Shapes\n")

# (stream, name, type, core, start_us, dur_us, block_dim)
MULTI = [
    ("2", "aclnnEmbedding", "Gather", "AI_VECTOR_CORE", "0.000", "10.000", 40),
    ("2", "aclnnRmsNorm_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", "1580.000", "32.500", 40),
    ("7", "moe_gate_MatMulV2", "MatMulV2", "AI_CORE", "1615.250", "9.750", 8),
    ("7", "moe_topk_TopKV2", "TopKV2", "AI_VECTOR_CORE", "1625.500", "9.250", 8),
    ("2", "aclnnCast_Cast", "Cast", "AI_VECTOR_CORE", "1635.000", "1.100", 40),
    ("2", "aclnnSwish_Swish", "Swish", "AI_VECTOR_CORE", "1636.200", "1.600", 40),
    ("2", "in_proj_qkv_MatMulV2", "MatMulV2", "AI_CORE", "1638.000", "22.750", 24),
    ("2", "attn_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC", "1661.000", "40.000", 24),
]


def single_stream(rows):
    """The same ops back to back on stream 2 (0.25 us launch gaps), as before the change."""
    out, t = [], None
    for s, name, typ, core, start, dur, bd in rows:
        t = float(start) if t is None or float(start) > t + 100 else t
        out.append(("2", name, typ, core, f"{t:.3f}", dur, bd))
        t = t + float(dur) + 0.25
    return out


def csv_text(rows) -> str:
    lines = [HEADER]
    for i, (s, name, typ, core, start, dur, bd) in enumerate(rows):
        whole, frac = start.split(".")
        lines.append(f'1,4294967295,{50 + i},{s},{name},{typ},dynamic,{core},'
                     f'"{BASE_US + int(whole)}.{frac}\t",{dur},0.5,{bd},0,"""1,4096"""\n')
    return "".join(lines)


if __name__ == "__main__":
    here = Path(__file__).parent
    for sub, rows in (("seed_multi_stream", MULTI), ("seed_single_stream", single_stream(MULTI))):
        (here / sub).mkdir(exist_ok=True)
        (here / sub / "kernel_details.csv").write_text(csv_text(rows))
        print(f"wrote {here / sub / 'kernel_details.csv'}")
