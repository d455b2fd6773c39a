"""Calibrated profiles as documents: numbers to a profile's precision, several
calibrations of one machine merged into their median, and the checked JSON."""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from ..device.profile import dumps_profile, loads_profile


def sig(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant figures: how a profile stores its measured numbers."""
    return float(f"{x:.{digits}g}")


def _median_of(values: list[Any]) -> Any:
    """One value from the same field of several calibrations: numbers their median (an
    int stays an int), dicts key by key over the calibrations that have the key, lists of
    one length element by element (a median of ascending sequences stays ascending, so a
    cold curve stays valid), anything else (text, lists of other lengths) the first's."""
    first = values[0]
    if all(isinstance(v, bool) for v in values):  # a yes/no the majority of them saw
        return 2 * sum(values) > len(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        if all(isinstance(v, int) for v in values):
            return statistics.median_low(values)
        return sig(statistics.median(values))
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: _median_of([v[k] for v in values if k in v]) for k in keys}
    if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
        return [_median_of(list(col)) for col in zip(*values)]
    if all(isinstance(v, list) for v in values):
        # cold curves of different lengths (one calibration found its idles out of order
        # and left it empty): the median of those of the most common non-zero length
        lengths = [len(v) for v in values if v]
        if lengths:
            common = max(set(lengths), key=lengths.count)
            return _median_of([v for v in values if len(v) == common])
    return first


#: figures :func:`repeat_spread` reports: (what, path in the profile, unit)
SPREAD_FIGURES = (
    ("executor per op", ("launch_overhead_us",), "us"),
    ("executor per call", ("run_overhead_us",), "us"),
    ("event wake-up", ("event_wake_us",), "us"),
    ("folded view", ("view_us",), "us"),
    ("fp32 matmul", ("peak_tflops", "cube", "fp32"), "TFLOPS"),
    ("copy bandwidth", ("memory_bandwidth_gbps",), "GB/s"),
)


def _at(profile: dict, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(profile, dict) or key not in profile:
            return None
        profile = profile[key]
    return profile


def repeat_spread(profiles: Sequence[dict], merged: dict) -> list[str]:
    """What moved between several calibrations of one machine, one line each: the headline
    figures as ``median (min-max)``, and the op rates' fixed costs on all cores as the
    median over op types of their spread (max - min over the median), with the widest.
    On a shared machine these can move by 2x between calibrations minutes apart, which
    bounds how close any prediction from one calibration can come."""
    lines = []
    for what, path, unit in SPREAD_FIGURES:
        got = [v for v in (_at(p, path) for p in profiles) if isinstance(v, (int, float))]
        mid = _at(merged, path)
        if got and isinstance(mid, (int, float)):
            lines.append(f"{what} {mid:.3g} {unit} ({min(got):.3g}-{max(got):.3g})")
    spreads = []
    for op, rate in (merged.get("op_rates") or {}).items():
        got = [p["op_rates"][op]["fixed_all_us"] for p in profiles
               if op in (p.get("op_rates") or {})]
        if len(got) > 1 and rate.get("fixed_all_us", 0) > 0:
            spreads.append(((max(got) - min(got)) / rate["fixed_all_us"], op, min(got), max(got)))
    if spreads:
        wide = max(spreads)
        lines.append(f"op rates' fixed cost on all cores: median spread "
                     f"{statistics.median(s[0] for s in spreads):.0%} over "
                     f"{len(spreads)} op types (widest {wide[1]}: "
                     f"{wide[2]:.3g}-{wide[3]:.3g} us)")
    return lines


def median_profile(profiles: Sequence[dict]) -> dict:
    """One profile from several calibrations of the same machine (``parastream calibrate
    --repeat N``): every measured number the median over them (:func:`_median_of`). The
    texts (sources, and the side figures they quote) are those of the calibration whose
    per-op figure is nearest the median; a ``repeat`` source names the count and the spread
    (:func:`repeat_spread`), and the description gives the medians. One calibration can
    land in a slow spell of a shared machine; the median of three does not follow one
    such spell."""
    if not profiles:
        raise ValueError("median_profile needs at least one profile")
    if len(profiles) == 1:
        return profiles[0]
    n = len(profiles)
    merged = _median_of(list(profiles))
    if not merged.get("cold_after_us"):  # most found idling costs nothing: no curve either
        merged["cold_curve"] = []
    mid = merged.get("launch_overhead_us", 0.0)
    donor = min(range(n), key=lambda i: abs(profiles[i].get("launch_overhead_us", 0.0) - mid))
    merged["sources"] = dict(profiles[donor]["sources"])
    spread = repeat_spread(profiles, merged)
    by = merged["sources"]["peak_tflops"].split(":")[0]
    merged["sources"]["repeat"] = (
        f"{by}: {n} calibrations one after another, each measured number the median over "
        f"them (the other sources' texts, and the side figures they quote, are calibration "
        f"{donor + 1}'s, whose per-op figure is nearest the median, the first on a tie); "
        f"spread, as median (min-max): {'; '.join(spread)}")
    executor = (f", executor {merged['launch_overhead_us']:.3g} us per op and "
                f"{merged['run_overhead_us']:.3g} us per call" if "run_overhead_us" in merged
                else f", {merged['launch_overhead_us']:.3g} us per task hand-off")
    merged["description"] = (
        f"This machine's CPU, the median of {n} calibrations by 'parastream calibrate' ("
        f"{by.rsplit(' ', 1)[-1]}): {merged['cores']['cube']} cores, "
        f"{merged['peak_tflops']['cube']['fp32']:.3g} TFLOPS fp32 matmul, "
        f"{merged['memory_bandwidth_gbps']:.3g} GB/s copy{executor}.")
    return merged


def dumps(profile: dict) -> bytes:
    """Profile JSON, checked by the device layer's own loader first."""
    import msgspec

    return dumps_profile(loads_profile(msgspec.json.encode(profile), profile["name"]))
