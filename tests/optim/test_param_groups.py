"""split_decay_params: which parameters get weight decay."""

from __future__ import annotations

from torch import nn

from ncl_lightning.optim import split_decay_params


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)  # weight: decay, bias: no decay
        self.bn = nn.BatchNorm2d(4)
        self.ln = nn.LayerNorm(4)
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True)
        self.fc = nn.Linear(4, 2, bias=False)
        self.frozen = nn.Linear(2, 2)
        self.frozen.requires_grad_(False)
        self.tied = self.fc  # shared module: its params must appear once


def test_split_decay_params():
    net = Net()
    decay, no_decay = split_decay_params(net)
    assert {id(p) for p in decay} == {id(net.conv.weight), id(net.fc.weight)}
    expected_no_decay = [net.conv.bias]
    for norm in (net.bn, net.ln, net.gn, net.inorm):
        expected_no_decay += [norm.weight, norm.bias]
    assert {id(p) for p in no_decay} == {id(p) for p in expected_no_decay}
    all_ids = [id(p) for p in decay + no_decay]
    assert len(all_ids) == len(set(all_ids))  # each parameter once
