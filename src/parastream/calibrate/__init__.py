"""Calibration: measure a device and write a ``parastream.device/1`` profile.

* :mod:`.device` — a cuda device's profile, measured through the executor;
* :mod:`.chains` — the chains of tiny ops both calibrations time through the executor,
  and the rounds they are timed in;
* :mod:`.profile` — profile documents: several calibrations merged, checked JSON.

The local CPU's calibration (op rates, cold costs, the cpu backend's executor costs) is
the cpu backend's own: :mod:`parastream.cpu.calibrate` and
:func:`parastream.cpu.overhead.calibrate_cpu`.

Nothing here imports torch at import time.
"""
