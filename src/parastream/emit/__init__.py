"""``parastream emit``: a model's forward as Python source with a plan applied, in the
target's own stream API (TorchAir GE graph mode, npugraph_ex/aclgraph, or CUDA).

* :mod:`parastream.emit.modlevel` writes the plan as a patch on the user's own module (a
  subclass whose forward calls the user's submodules inside the stream blocks, or a diff of
  its source file) whenever the plan's branches are whole submodule calls.
* :mod:`parastream.emit.devices`: where core limits are documented, and the API releases a
  generated file checks for at import.
* :mod:`parastream.emit.codegen` traces the model the way the importer does (so node names
  are the plan's op names) and writes the module: an ``nn.Module`` wrapper whose forward runs
  every node inside the target's stream contexts, each stream's work as early as its inputs
  allow (:mod:`parastream.emit.order`), with the plan's events, guarded by the plan's enable
  switch (off by default: the original forward runs).
* :mod:`parastream.emit.standins` provides recording stand-ins for the three stream APIs,
  so the same generated file runs on a CPU, and checks the recorded calls against the plan.
* :mod:`parastream.cli.emit` adds ``parastream emit PLAN --target ...``.

Nothing here imports torch until it is used.
"""

from __future__ import annotations

TARGETS = ("torchair", "npugraph_ex", "cuda")

__all__ = ["TARGETS"]
