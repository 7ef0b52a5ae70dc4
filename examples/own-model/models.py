"""Your own PyTorch models, as islands trains them (examples/own-model).

``islands run examples/own-model/resnet.toml`` imports ``models:small_resnet`` from this
folder (a job file's folder is searched for its factory); ``train_head.py`` uses
``Backbone`` and ``head_model`` from Python. Nothing here knows about islands: these are
ordinary ``nn.Module`` s.
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """A ResNet basic block (He et al. 2016): two 3×3 convolutions with batch norm."""

    def __init__(self, channels_in: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                                          nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """A small ResNet for 1-channel images: a stem, ``stages`` of two blocks, a linear head."""

    def __init__(self, channels: int = 8, stages: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())
        layers: list[nn.Module] = []
        width = channels
        for k in range(stages):
            out = channels * 2**k
            layers += [Block(width, out, stride=1 if k == 0 else 2), Block(out, out)]
            width = out
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.body(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def small_resnet(channels: int = 8, stages: int = 2, classes: int = 10) -> nn.Module:
    """The factory the job file names: ``factory = "models:small_resnet"``."""
    return SmallResNet(channels, stages, classes)


class Backbone(nn.Module):
    """A feature extractor for 8×8 digits: 2 convolutions, 128 features out."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 8, 3, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(4), nn.Flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def head_model(backbone: Backbone, classes: int = 10) -> nn.Module:
    """The backbone, frozen, under a trainable linear head: only the head travels."""
    for p in backbone.parameters():
        p.requires_grad_(False)
    return nn.Sequential(backbone, nn.Linear(128, classes))
