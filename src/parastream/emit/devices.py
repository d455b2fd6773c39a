"""Which stream APIs a generated file may call on which device and software version.

Core limits (``limit_core_num``) are emitted only where the vendor documentation lists them
for the plan's device; the generated file checks at import that the installed torchair /
torch_npu has every API it calls (``hasattr``) and names the minimum version otherwise.

The facts per device live in each device profile's ``core_limit`` object, with the documents
that state them (docs/device-profiles.md, "Core limits").
"""

from __future__ import annotations

from dataclasses import dataclass

#: the first release documenting each API a generated file calls (the import check names
#: it). TorchAir 7.0.0 user guide: npu_stream_switch (torchair_0074), npu_wait_tensor
#: (torchair_0076); 7.1.0: scope.limit_core_num (torchair_00091); TorchNPU 26.0.0:
#: npugraph_ex.scope.limit_core_num. Which devices allow core limits is each device
#: profile's ``core_limit`` object.
TORCHAIR_STREAMS = "Ascend Extension for PyTorch 7.0.0 (torchair)"
TORCHAIR_LIMIT = "Ascend Extension for PyTorch 7.1.0 (torchair)"
NPUGRAPH_EX_LIMIT = "TorchNPU 26.0.0 (torch_npu)"


#: the targets whose stream API has a core limit, as a device profile's ``core_limit``
#: object names them (``CoreLimitFacts.torchair`` / ``.npugraph_ex``); CUDA's has none
LIMIT_TARGETS = ("torchair", "npugraph_ex")


def has_core_limit_api(target: str) -> bool:
    """Whether ``target``'s stream API has a core limit on any device (which devices
    document it is each profile's ``core_limit``: :func:`core_limit`)."""
    return target in LIMIT_TARGETS


@dataclass(frozen=True)
class CoreLimit:
    """Whether a device's documentation lists core limits for each Ascend target."""

    torchair: bool
    npugraph_ex: bool
    min_torch_npu: str
    source: str

    def allows(self, target: str) -> bool:
        """Whether a core limit may be emitted for ``target`` on this device."""
        return has_core_limit_api(target) and bool(getattr(self, target))


UNKNOWN = CoreLimit(False, False, "", "no device profile named in the plan: core limits are "
                    "emitted only for a device whose documentation lists them")


def core_limit(device: str | None) -> CoreLimit:
    """The core-limit facts of ``device`` (a shipped profile name or a profile path), from
    the profile's ``core_limit`` object (the device layer holds them, with their sources,
    for the planner's C2 rung and for generated code alike); :data:`UNKNOWN` (nothing
    allowed) when the device or its profile cannot be found or says nothing."""
    if not device or device == "?":
        return UNKNOWN
    from ..device.profile import load_profile
    from ..errors import InputError

    try:
        facts = load_profile(device).core_limit
    except InputError:
        return UNKNOWN
    if facts is None:
        return CoreLimit(False, False, "", f"the {device} profile lists no core limit API")
    return CoreLimit(facts.torchair, facts.npugraph_ex, facts.min_torch_npu, facts.source)


def vector_per_cube(device: str | None, default: float = 2.0) -> float:
    """Vector cores per AI core for a C2 limit that names only ``aicore_num``, from
    ``device``'s profile: 0 where matrix and vector work share the cores (its
    ``shared_cores``: the first 910, whose cube and vector units sit in one AI core, and
    GPUs and CPUs, none of which documents a core limit), else its vector / cube count
    (Atlas A2/A3: 48 / 24); ``default`` (Atlas A2/A3's 2) when there is no profile."""
    if not device or device == "?":
        return default
    try:
        from ..device.profile import load_profile

        prof = load_profile(device)
    except Exception:
        return default
    if prof.shared_cores:
        return 0.0
    return prof.cores.vector / max(1, prof.cores.cube)


#: API the generated code calls -> the release that documents it (for the import check)
def required_apis(target: str, limits: bool) -> dict[str, str]:
    """``{dotted name under the API object: minimum release}`` a generated file calls."""
    if target == "torchair":
        need = {"scope.npu_stream_switch": TORCHAIR_STREAMS,
                "scope.npu_wait_tensor": TORCHAIR_STREAMS}
        if limits:
            need["scope.limit_core_num"] = TORCHAIR_LIMIT
        return need
    if target == "npugraph_ex":
        need = {}  # Stream / Event / stream / record_stream: every torch_npu
        if limits:
            need["npugraph_ex.scope.limit_core_num"] = NPUGRAPH_EX_LIMIT
        return need
    return {}


__all__ = ["CoreLimit", "LIMIT_TARGETS", "UNKNOWN", "core_limit", "has_core_limit_api",
           "required_apis", "vector_per_cube"]
