"""Fixtures shared across the test folders."""

from __future__ import annotations

import faulthandler
import os
import sys

import pytest
from hypothesis import settings

# no per-example deadline: CI runs two test workers on two cores, and an example that is
# descheduled (or meets a garbage collection) is not a failure of the property.
# Derandomized: the suite draws the same examples on every run, so a red run is the
# commit's doing. PARASTREAM_HYPOTHESIS=explore draws fresh random examples (1000 where a
# test sets no count of its own) to hunt for counterexamples; pin each one with @example.
settings.register_profile("parastream", deadline=None, derandomize=True)
settings.register_profile("explore", deadline=None, derandomize=False,
                          max_examples=1000)
settings.load_profile("explore" if os.environ.get("PARASTREAM_HYPOTHESIS") == "explore"
                      else "parastream")

#: seconds one threaded test may run before its stacks are dumped and the process ends
try:
    WATCHDOG_S = float(os.environ.get("PARASTREAM_TEST_WATCHDOG_S", "300"))
except ValueError:
    WATCHDOG_S = 300.0


@pytest.fixture
def watchdog():
    """A hang dumps all thread stacks and ends the process instead of blocking the suite
    (pytest-timeout is not a dependency). Folders with threaded tests use it autouse. A
    hang detector, not a time limit: generous, since a loaded CI machine stretches the
    tests that start Python subprocesses."""
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


#: a user model file whose eager forward takes nn.MultiheadAttention's fused fast path (a
#: TransformerEncoderLayer in inference) beside a linear: ``make`` builds it
ENCODER_MODEL = (
    "import torch\n"
    "class Enc(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.enc = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)\n"
    "        self.lin = torch.nn.Linear(16, 16)\n"
    "    def forward(self, x):\n"
    "        return self.enc(x) + self.lin(x)\n"
    "def make():\n"
    "    torch.manual_seed(0)\n"
    "    return Enc().eval(), (torch.randn(2, 5, 16),)\n")


@pytest.fixture
def encoder_model(tmp_path) -> str:
    """The path of :data:`ENCODER_MODEL` written to a file (``<path>:make`` names it)."""
    f = tmp_path / "encoder_model.py"
    f.write_text(ENCODER_MODEL)
    return str(f)


@pytest.fixture
def seed_prolog():
    """The seed's attention prolog as a hand-built graph: main x -> q_a -> q_b (the
    dominator, 60 us); side kv_a (50 us), whose precompute z_cast -> z_silu on main feeds
    the merge and does not depend on q_b: GE may hoist it and serialise the streams."""
    from parastream.graph.ir import Edge, Graph, Op

    spec = [("x", "rms_norm", "vector", 5), ("kv_a", "mm", "cube", 50), ("q_a", "mm", "cube", 5),
            ("q_b", "mm", "cube", 60), ("z_cast", "cast", "vector", 1),
            ("z_silu", "silu", "vector", 1.5), ("merge", "add", "vector", 2)]
    ops = [Op(name=n, type=t, resource=r, meta={"dur_us": d, "block_dim": 8})
           for n, t, r, d in spec]
    edges = [("x", "q_a"), ("q_a", "q_b"), ("x", "kv_a"), ("kv_a", "z_cast"),
             ("z_cast", "z_silu"), ("q_b", "merge"), ("z_silu", "merge")]
    return Graph(name="prolog", ops=ops, edges=[Edge(src=a, dst=b) for a, b in edges])
