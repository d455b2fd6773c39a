"""Which stream APIs a generated file may call on which device and software version.

Core limits (``limit_core_num``) are emitted only where the vendor documentation lists them
for the plan's device; the generated file checks at import that the installed torchair /
torch_npu has every API it calls (``hasattr``) and names the minimum version otherwise.

The facts per shipped device profile are in :data:`CORE_LIMIT`; a profile JSON that holds a
``core_limit`` object of the same shape overrides them (see docs/device-profiles.md,
"Core limits").
"""

from __future__ import annotations

import json
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


_A2 = CoreLimit(True, True, "26.0.0",
                f"{TORCHAIR_LIMIT[1]}; {NPUGRAPH_EX_LIMIT[1]}")
#: shipped profile name -> facts. The first Ascend 910 (Atlas training series) is not in
#: either list; CUDA has no per-stream core limit at all.
CORE_LIMIT: dict[str, CoreLimit] = {
    "ascend910": CoreLimit(False, False, "", "not in the products of TorchAir's "
                           "limit_core_num (7.1.0 torchair_00091: Atlas A2 / A3 only) nor of "
                           "the aclgraph core-limit guide (Atlas A2 / A3 only)"),
    "ascend910b": _A2,
    "h100": CoreLimit(False, False, "", "CUDA: no per-stream or per-op core limit API"),
    "h200": CoreLimit(False, False, "", "CUDA: no per-stream or per-op core limit API"),
    "cpu": CoreLimit(False, False, "", "CPU: no core limit API"),
}

UNKNOWN = CoreLimit(False, False, "", "no device profile named in the plan: core limits are "
                    "emitted only for a device whose documentation lists them")


def core_limit(device: str | None) -> CoreLimit:
    """The core-limit facts of ``device`` (a shipped profile name or a profile path): the
    profile's own ``core_limit`` object when it has one, else :data:`CORE_LIMIT`, else
    :data:`UNKNOWN` (nothing allowed)."""
    if not device or device == "?":
        return UNKNOWN
    own = _profile_field(device)
    if own is not None:
        return own
    from ..device.profile import shipped_key

    try:
        key = shipped_key(device)
    except Exception:
        return UNKNOWN
    return CORE_LIMIT.get(key, UNKNOWN)


def _profile_field(device: str) -> CoreLimit | None:
    """The ``core_limit`` object of the profile JSON ``device`` names, or None."""
    from pathlib import Path

    try:
        from ..device.profile import _builtin_dir, shipped_key

        path = Path(device)
        if path.suffix == ".json" and path.is_file():
            raw = json.loads(path.read_text(encoding="utf-8"))
        else:
            f = _builtin_dir() / f"{shipped_key(device)}.json"
            raw = json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}
    except Exception:
        return None
    spec = raw.get("core_limit") if isinstance(raw, dict) else None
    if not isinstance(spec, dict):
        return None
    return CoreLimit(bool(spec.get("torchair")), bool(spec.get("npugraph_ex")),
                     str(spec.get("min_torch_npu", "")), str(spec.get("source", "")))


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


__all__ = ["CORE_LIMIT", "CoreLimit", "UNKNOWN", "core_limit", "required_apis"]
