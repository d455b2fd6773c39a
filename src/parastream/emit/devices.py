"""Which stream APIs a generated file may call on which device and software version.

Core limits (``limit_core_num``) are emitted only where the vendor documentation lists them
for the plan's device; the generated file checks at import that the installed torchair /
torch_npu has every API it calls (``hasattr``) and names the minimum version otherwise.

The facts per device live in each device profile's ``core_limit`` object, with the documents
that state them (docs/device-profiles.md, "Core limits").
"""

from __future__ import annotations

from dataclasses import dataclass

#: TorchAir GE graph mode: where npu_stream_switch / npu_wait_tensor are documented
TORCHAIR_STREAMS = ("Ascend Extension for PyTorch 7.0.0 (torchair)",
                    "TorchAir user guide 7.0.0: npu_stream_switch torchair_0074, "
                    "npu_wait_tensor torchair_0076 (hiascend.com/document/detail/zh/Pytorch/700)")
#: torchair.scope.limit_core_num (operator level, max-autotune)
TORCHAIR_LIMIT = ("Ascend Extension for PyTorch 7.1.0 (torchair)",
                  "TorchAir user guide 7.1.0, limit_core_num (torchair_00091): 'only Atlas A2 "
                  "training / Atlas 800I A2 inference and Atlas A3 training / inference "
                  "products'; Ascend/torchair docs/zh/context/图内AI-Core和Vector-Core算子级核数配置.md "
                  "lists Atlas A3 and Atlas A2")
#: torch.npu.npugraph_ex.scope.limit_core_num (stream level, aclgraph)
NPUGRAPH_EX_LIMIT = ("TorchNPU 26.0.0 (torch_npu)",
                     "TorchAir 26.0.0 docs/zh/npugraph_ex/api/api_list.md lists "
                     "torch.npu.npugraph_ex.scope.limit_core_num; the aclgraph core-limit "
                     "guide (torchair_00024 family, 7.3.0) supports Atlas A2 and A3 only")


@dataclass(frozen=True)
class CoreLimit:
    """Whether a device's documentation lists core limits for each Ascend target."""

    torchair: bool
    npugraph_ex: bool
    min_torch_npu: str
    source: str

    def allows(self, target: str) -> bool:
        return bool(getattr(self, target, False)) if target in ("torchair", "npugraph_ex") \
            else False


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


#: API the generated code calls -> the release that documents it (for the import check)
def required_apis(target: str, limits: bool) -> dict[str, str]:
    """``{dotted name under the API object: minimum release}`` a generated file calls."""
    if target == "torchair":
        need = {"scope.npu_stream_switch": TORCHAIR_STREAMS[0],
                "scope.npu_wait_tensor": TORCHAIR_STREAMS[0]}
        if limits:
            need["scope.limit_core_num"] = TORCHAIR_LIMIT[0]
        return need
    if target == "npugraph_ex":
        need = {}  # Stream / Event / stream / record_stream: every torch_npu
        if limits:
            need["npugraph_ex.scope.limit_core_num"] = NPUGRAPH_EX_LIMIT[0]
        return need
    return {}


__all__ = ["CoreLimit", "UNKNOWN", "core_limit", "required_apis"]
