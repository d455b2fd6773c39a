"""Module tables of convolutional networks imported from torch: a conv+bn+relu block is one
module, an Inception branch is one module, each Inception block one parallel point."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from points_oracle import module_errors, point_errors  # noqa: E402
from parastream.device import load_profile  # noqa: E402
from parastream.graph.decompose import decompose  # noqa: E402
from parastream.graph.torch_import import import_module  # noqa: E402


class BasicConv2d(nn.Module):
    """conv -> batch norm -> relu, the relu in the block's own forward (GoogLeNet's)."""

    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    def __init__(self, cin: int, c1: int, c3: tuple[int, int], c5: tuple[int, int],
                 cp: int) -> None:
        super().__init__()
        self.branch1 = BasicConv2d(cin, c1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(cin, c3[0], 1), BasicConv2d(c3[0], c3[1], 3))
        self.branch3 = nn.Sequential(BasicConv2d(cin, c5[0], 1), BasicConv2d(c5[0], c5[1], 3))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1),
                                     BasicConv2d(cin, cp, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x),
                          self.branch4(x)], 1)


class TinyGoogLeNet(nn.Module):
    """A stem, two Inception blocks, pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = BasicConv2d(3, 16, 3)
        self.maxpool1 = nn.MaxPool2d(2)
        self.inception3a = Inception(16, 8, (8, 16), (4, 8), 8)
        self.inception3b = Inception(40, 16, (16, 24), (4, 8), 8)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(56, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inception3b(self.inception3a(self.maxpool1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


@pytest.fixture(scope="module")
def googlenet():
    torch.manual_seed(0)
    g = import_module(TinyGoogLeNet().eval(), (torch.randn(2, 3, 32, 32),), name="googlenet")
    return g, decompose(g, load_profile("ascend910b"))


def test_conv_bn_relu_is_one_module_and_a_branch_is_a_module(googlenet):
    g, d = googlenet
    names = {m.module_name: m for m in d.modules}
    assert len(d.modules) < len(g.ops) / 2  # the module table is not the op table
    for block in ("inception3a", "inception3b"):
        for b in ("branch1", "branch2", "branch3", "branch4"):
            assert f"{block}.{b}" in names, sorted(names)
        for b in ("branch1", "branch2", "branch3"):
            m = names[f"{block}.{b}"]
            assert m.module_type == "conv"
            kinds = {g.op(n).type for n in m.ops}
            assert any("conv" in k for k in kinds) and any("relu" in k for k in kinds)
    assert names["conv1"].module_type == "conv" and len(names["conv1"].ops) >= 3
    # no relu is a module of its own, and nothing without a convolution is typed conv
    for m in d.modules:
        kinds = [g.op(n).type for n in m.ops]
        assert kinds != ["relu"], m.module_name
        if m.module_type == "conv":
            assert any("conv" in k for k in kinds), m.module_name


def test_each_inception_block_is_one_four_branch_point(googlenet):
    g, d = googlenet
    assert module_errors(g, d) == [] and point_errors(g, d) == []
    name = {m.module_id: m.module_name for m in d.modules}
    four = [p for p in d.parallel_points if len(p.branches) == 4]
    assert len(four) == 2
    for p, block in zip(four, ("inception3a", "inception3b")):
        assert sorted(name[n] for b in p.branches for n in b.nodes) == [
            f"{block}.branch{i}" for i in range(1, 5)]
        assert name[p.join].startswith(block)  # the block's concat
