"""Calibration: measure a device and write a ``parastream.device/1`` profile.

* :mod:`.cpu` — the local CPU (``parastream calibrate``): matmul, vector and copy rates,
  DRAM rates, task hand-off; with :mod:`.op_rates` (per op type costs, cold costs);
* :mod:`.overhead` — the cpu backend's executor costs on top (per op, per call, per
  wake-up, per stream, per folded view), and the whole cpu calibration
  (:func:`~parastream.calibrate.overhead.calibrate_cpu`);
* :mod:`.device` — a cuda device's profile, measured through the executor;
* :mod:`.profile` — profile documents: several calibrations merged, checked JSON;
* :mod:`.host`, :mod:`.timing` — the cores this process may use, busy-machine checks,
  and the timing primitives the measurements share.

Nothing here imports torch at import time.
"""
