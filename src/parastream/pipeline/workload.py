"""The demo workload of ``parastream pipeline``: image classification, stage by stage.

Items are batches of JPEG images generated deterministically with numpy + Pillow (no data
download). Stages: ``decode`` (JPEG -> RGB, resize), ``normalize`` (uint8 HWC -> float
NCHW, mean/std), ``h2d`` (copy to the device; a plain host copy on cpu), ``infer`` (a small
CNN defined here), ``d2h`` (copy back), ``postprocess`` (softmax, top-k). Pillow's decoder
and resampler and torch's kernels release the GIL, which is what lets host threads overlap.

torch is imported inside the functions that need it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .core import Stage

STAGE_NAMES = ("decode", "normalize", "h2d", "infer", "d2h", "postprocess")
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


@dataclass(frozen=True)
class WorkloadConfig:
    """Sizes of the demo: images per item, source size, network input side, classes, top-k."""

    batch: int = 4
    width: int = 640
    height: int = 480
    side: int = 112
    #: distinct JPEGs generated; items cycle through them (generation is slower than decode)
    pool: int = 32
    classes: int = 100
    topk: int = 5
    quality: int = 85


def make_jpeg(index: int, width: int = 640, height: int = 480, quality: int = 85) -> bytes:
    """A deterministic JPEG: smooth colour gradients, a few rectangles and noise, seeded by
    ``index`` (the same bytes on every run and machine with the same Pillow)."""
    from PIL import Image

    rng = np.random.default_rng(index)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    a, b, c = rng.uniform(0.005, 0.05, 3)
    img = np.stack([127 + 120 * np.sin(a * x + b * y + k * c * 40) for k in range(3)], -1)
    for _ in range(4):
        x0, y0 = rng.integers(0, width - 40), rng.integers(0, height - 40)
        img[y0:y0 + rng.integers(20, 80), x0:x0 + rng.integers(20, 120)] = rng.integers(0, 256, 3)
    img += rng.normal(0, 12, img.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB").save(buf, "JPEG",
                                                                       quality=quality)
    return buf.getvalue()


def make_items(n: int, cfg: WorkloadConfig = WorkloadConfig()) -> list[list[bytes]]:
    """``n`` items of ``cfg.batch`` JPEGs each, drawn in turn from ``cfg.pool`` distinct
    images (generated once, before any timing)."""
    pool = [make_jpeg(k, cfg.width, cfg.height, cfg.quality)
            for k in range(min(cfg.pool, max(1, n * cfg.batch)))]
    return [[pool[(i * cfg.batch + j) % len(pool)] for j in range(cfg.batch)] for i in range(n)]


def corrupt_items(items: list[list[bytes]], bad: Sequence[int]) -> list[list[bytes]]:
    """``items`` with the first JPEG of each item in ``bad`` cut short (its header and a
    few bytes): the decode stage then raises on exactly those items, the fault a damaged
    file in a real input gives. The other items are left as they are."""
    out = list(items)
    for i in sorted(set(bad)):
        first, *rest = out[i]
        out[i] = [first[:_CUT], *rest]
    return out


#: bytes a corrupt JPEG keeps: the markers Pillow needs to open it, not its scan data
_CUT = 400


def decode_resize(jpegs: list[bytes], side: int = 112) -> np.ndarray:
    """JPEG bytes -> uint8 array (B, side, side, 3), bilinear resize."""
    from PIL import Image

    out = np.empty((len(jpegs), side, side, 3), np.uint8)
    for i, data in enumerate(jpegs):
        with Image.open(io.BytesIO(data)) as im:
            out[i] = np.asarray(im.convert("RGB").resize((side, side), Image.BILINEAR))
    return out


def normalize(batch_u8: np.ndarray) -> Any:
    """uint8 NHWC -> float32 NCHW tensor, (x / 255 - mean) / std."""
    import torch

    t = torch.from_numpy(batch_u8).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.from_numpy(MEAN).view(1, 3, 1, 1)
    std = torch.from_numpy(STD).view(1, 3, 1, 1)
    return t.sub_(mean).div_(std).contiguous()


def host_copy(t: Any) -> Any:
    """The cpu backend's device copy: a plain host copy (there is no separate memory)."""
    return t.clone()


def make_model(classes: int = 100, seed: int = 0) -> Any:
    """A small CNN (4 conv blocks, global pool, linear head) with seeded weights, in eval
    mode. Defined here so the demo needs no model download."""
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            chans = [3, 32, 64, 128, 192]
            layers: list[nn.Module] = []
            for cin, cout in zip(chans, chans[1:]):
                layers += [nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                           nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                           nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                           nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(chans[-1], classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x).mean(dim=(2, 3)))

    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = SmallCNN().eval()
    finally:
        torch.random.set_rng_state(gen_state)
    return model


def make_infer(model: Any) -> Callable[[Any], Any]:
    """The infer stage: the model's forward under inference mode."""
    import torch

    def infer(x: Any) -> Any:
        with torch.inference_mode():
            return model(x)

    return infer


def make_postprocess(k: int = 5) -> Callable[[Any], tuple[np.ndarray, np.ndarray]]:
    """Softmax over classes and the top-k (class ids, probabilities) per image."""
    import torch

    def postprocess(logits: Any) -> tuple[np.ndarray, np.ndarray]:
        with torch.inference_mode():
            p = torch.softmax(logits, dim=1)
            v, i = torch.topk(p, k, dim=1)
        return i.numpy().copy(), v.numpy().copy()

    return postprocess


def make_stages(cfg: WorkloadConfig = WorkloadConfig(), replicas: Mapping[str, int] | None = None,
                model: Any = None) -> list[Stage]:
    """The six stages of the demo, with ``replicas`` per stage name (default 1)."""
    replicas = dict(replicas or {})
    unknown = set(replicas) - set(STAGE_NAMES)
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages: {', '.join(STAGE_NAMES)}")
    model = model if model is not None else make_model(cfg.classes)
    side = cfg.side
    fns: dict[str, tuple[Callable[[Any], Any], str]] = {
        "decode": (lambda b: decode_resize(b, side), "host"),
        "normalize": (normalize, "host"),
        "h2d": (host_copy, "copy"),
        "infer": (make_infer(model), "device"),
        "d2h": (host_copy, "copy"),
        "postprocess": (make_postprocess(cfg.topk), "host"),
    }
    return [Stage(n, fns[n][0], fns[n][1], replicas.get(n, 1)) for n in STAGE_NAMES]


def same_outputs(a: list[tuple[np.ndarray, np.ndarray]],
                 b: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Identical top-k ids and probabilities, item by item."""
    return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
                                    for x, y in zip(a, b))
