"""Inception-v4 (tiny / base): ``forward(pixel_values) -> logits``.

Written from the published architecture (Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of
Residual Connections on Learning", 2016, figures 3-9): the stem (three 3x3 convolutions, then three
two-branch mixing blocks), 4x Inception-A, Reduction-A, 7x Inception-B (factorised 1x7/7x1 convolutions),
Reduction-B, 3x Inception-C (split 1x3/3x1 branches), global average pooling and a linear classifier. Every
convolution is conv (no bias) + BatchNorm + ReLU; pooling branches average over 3x3 windows without
counting the padding. ``width`` scales every channel count (1.0 = the paper) and ``blocks`` the A/B/C
repeats; benchmarking ran it at 224x224 (``inception_v4 -c 224``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from ._cnn import ConvBnAct, build_cnn, scaled
from .spec import ModelSpec

TASKS = ("image_classification",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(width=0.25, blocks=[1, 1, 1], image_size=96, num_labels=10),
    "base": dict(width=1.0, blocks=[4, 7, 3], image_size=224, num_labels=1000),
}


def _conv(cin: int, cout: int, kernel: Any = 1, stride: int = 1, padding: Any = 0) -> ConvBnAct:
    return ConvBnAct(cin, cout, kernel, stride, padding, eps=1e-3)


def _avg() -> nn.Module:
    return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)


class _Concat(nn.Module):
    """Runs parallel branches on one input and concatenates them along channels."""

    def __init__(self, *branches: nn.Module):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], dim=1)


class _InceptionC(nn.Module):
    """Inception-C: two branches that fork again into parallel 1x3 and 3x1 convolutions."""

    def __init__(self, c: Any):
        super().__init__()
        cin = c(1536)
        self.b0 = _conv(cin, c(256))
        self.b1 = _conv(cin, c(384))
        self.b1a, self.b1b = _conv(c(384), c(256), (1, 3), 1, (0, 1)), _conv(c(384), c(256), (3, 1), 1, (1, 0))
        self.b2 = nn.Sequential(_conv(cin, c(384)), _conv(c(384), c(448), (3, 1), 1, (1, 0)),
                                _conv(c(448), c(512), (1, 3), 1, (0, 1)))
        self.b2a, self.b2b = _conv(c(512), c(256), (1, 3), 1, (0, 1)), _conv(c(512), c(256), (3, 1), 1, (1, 0))
        self.b3 = nn.Sequential(_avg(), _conv(cin, c(256)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y1, y2 = self.b1(x), self.b2(x)
        return torch.cat([self.b0(x), self.b1a(y1), self.b1b(y1), self.b2a(y2), self.b2b(y2), self.b3(x)], dim=1)


class InceptionV4(nn.Module):
    """Inception-v4 image classifier (see the module docstring)."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__()
        w = float(cfg["width"])

        def c(ch: int) -> int:
            return scaled(ch, w)

        n_a, n_b, n_c = cfg["blocks"]
        pool = lambda: nn.MaxPool2d(3, stride=2)  # noqa: E731
        stem = [_conv(3, c(32), 3, 2), _conv(c(32), c(32), 3), _conv(c(32), c(64), 3, 1, 1),
                _Concat(pool(), _conv(c(64), c(96), 3, 2)),
                _Concat(nn.Sequential(_conv(c(160), c(64)), _conv(c(64), c(96), 3)),
                        nn.Sequential(_conv(c(160), c(64)), _conv(c(64), c(64), (1, 7), 1, (0, 3)),
                                      _conv(c(64), c(64), (7, 1), 1, (3, 0)), _conv(c(64), c(96), 3))),
                _Concat(_conv(c(192), c(192), 3, 2), pool())]
        blocks = []
        for _ in range(n_a):
            cin = c(384)
            blocks.append(_Concat(_conv(cin, c(96)), nn.Sequential(_conv(cin, c(64)), _conv(c(64), c(96), 3, 1, 1)),
                                  nn.Sequential(_conv(cin, c(64)), _conv(c(64), c(96), 3, 1, 1),
                                                _conv(c(96), c(96), 3, 1, 1)),
                                  nn.Sequential(_avg(), _conv(cin, c(96)))))
        cin = c(384)
        blocks.append(_Concat(_conv(cin, c(384), 3, 2),
                              nn.Sequential(_conv(cin, c(192)), _conv(c(192), c(224), 3, 1, 1),
                                            _conv(c(224), c(256), 3, 2)),
                              pool()))
        for _ in range(n_b):
            cin = c(1024)
            blocks.append(_Concat(
                _conv(cin, c(384)),
                nn.Sequential(_conv(cin, c(192)), _conv(c(192), c(224), (1, 7), 1, (0, 3)),
                              _conv(c(224), c(256), (7, 1), 1, (3, 0))),
                nn.Sequential(_conv(cin, c(192)), _conv(c(192), c(192), (7, 1), 1, (3, 0)),
                              _conv(c(192), c(224), (1, 7), 1, (0, 3)), _conv(c(224), c(224), (7, 1), 1, (3, 0)),
                              _conv(c(224), c(256), (1, 7), 1, (0, 3))),
                nn.Sequential(_avg(), _conv(cin, c(128)))))
        cin = c(1024)
        blocks.append(_Concat(nn.Sequential(_conv(cin, c(192)), _conv(c(192), c(192), 3, 2)),
                              nn.Sequential(_conv(cin, c(256)), _conv(c(256), c(256), (1, 7), 1, (0, 3)),
                                            _conv(c(256), c(320), (7, 1), 1, (3, 0)), _conv(c(320), c(320), 3, 2)),
                              pool()))
        for _ in range(n_c):
            blocks.append(_InceptionC(c))
        self.features = nn.Sequential(*stem, *blocks)
        self.fc = nn.Linear(c(1536), cfg["num_labels"])

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(pixel_values).mean((2, 3)))


def build(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build Inception-v4 ``variant`` as an image classifier."""
    return build_cnn("inception_v4", VARIANTS, TASKS, InceptionV4,
                     lambda c: f"Inception-v4 {variant} (width {c['width']}, A/B/C blocks {c['blocks']}) "
                               f"-> logits [{c['num_labels']}]",
                     variant, microbatch, image_size, task, seed, overrides)
