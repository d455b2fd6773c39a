"""The cpu backend: streams as worker threads of one process, on the host's cores.

Each stream is a persistent worker thread with a FIFO; the streams split the cores between
their torch intra-op thread teams and share Python's interpreter lock, so an op's dispatch
is host time inside the op rather than a launch that overlaps a device. Everything that
exists only for this backend lives here; the layers below find it through registries that
load a module by name when first needed (the runtime's backend registry,
:data:`parastream.device.cost.COST_MODELS`, :data:`parastream.sim.resource.RESOURCES`),
never by importing this package.

* :mod:`.backend` — :class:`~parastream.cpu.backend.CpuBackend`: streams as worker
  threads, events as completion flags, per-stream op and wait records;
* :mod:`.cost` — the cost model of torch's CPU kernels (``host_kernels``): op rates in
  place of the roofline, DRAM floors, serial GEMVs and small ops, folded views, cold costs;
* :mod:`.calibrate` — ``parastream calibrate``'s measurement of the local CPU (matmul,
  vector and copy rates, DRAM rates, task hand-off), with :mod:`.op_rates` (per op type
  costs, cold costs) and :mod:`.timing` (the timing primitives they share);
* :mod:`.overhead` — the executor's own costs on top (per op, per call, per wake-up, per
  stream, per folded view) and the whole cpu calibration
  (:func:`~parastream.cpu.overhead.calibrate_cpu`);
* :mod:`.hostlock` — the interpreter lock as a resource plugged into the simulator: a
  task holds it for its op's Python part, and a worker that finds it taken sleeps;
* :mod:`.busy` — whether other work takes the cores before or during a measurement;
* :mod:`.malloc` — the allocator's settings (``--malloc keep|system``);
* :mod:`.baseline` — both sides measured again in their best OpenMP wait policy, each in
  a process of its own.

Nothing here imports torch at import time.
"""
