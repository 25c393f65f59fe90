"""VoVNet-V2 (tiny / 39 = ``ese_vovnet39b``): ``forward(pixel_values) -> logits``.

Written from the published architecture (Lee & Park, "CenterMask: Real-Time Anchor-Free Instance
Segmentation", 2020): a 3-conv stem (stride 4), then stages of One-Shot-Aggregation (OSA) modules. An OSA
module runs ``layers`` 3x3 convolutions in sequence, concatenates the input and every intermediate output
once, projects them with a 1x1 convolution, gates the result with effective Squeeze-Excitation (eSE: global
average pool -> 1x1 conv -> hard sigmoid) and, in every module but a stage's first, adds the input back.
Stages after the first start with a 3x3/2 max-pool (ceil mode).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import nn

from ._cnn import ConvBnAct, build_cnn
from .spec import ModelSpec

TASKS = ("image_classification",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(stem=[16, 16, 32], conv_channels=[16, 24, 32, 40], out_channels=[32, 64, 96, 128],
                 blocks=[1, 1, 1, 1], layers=3, image_size=64, num_labels=10),
    # ese_vovnet39b, as benchmarking's ``vovnet_v2 -c 39``
    "39": dict(stem=[64, 64, 128], conv_channels=[128, 160, 192, 224], out_channels=[256, 512, 768, 1024],
               blocks=[1, 1, 2, 2], layers=5, image_size=224, num_labels=1000),
}


class EffectiveSE(nn.Module):
    """eSE channel attention: ``x * hard_sigmoid(conv1x1(mean_hw(x)))``."""

    def __init__(self, channels: int):
        super().__init__()
        self.fc = nn.Conv2d(channels, channels, 1, bias=True)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc(x.mean((2, 3), keepdim=True)))


class OSAModule(nn.Module):
    """One-Shot Aggregation: ``layers`` chained 3x3 convs, one concat, 1x1 projection, eSE, residual."""

    def __init__(self, cin: int, mid: int, cout: int, layers: int, residual: bool):
        super().__init__()
        convs: List[nn.Module] = []
        ch = cin
        for _ in range(layers):
            convs.append(ConvBnAct(ch, mid, 3))
            ch = mid
        self.convs = nn.ModuleList(convs)
        self.concat = ConvBnAct(cin + layers * mid, cout, 1)
        self.ese = EffectiveSE(cout)
        self.residual = residual and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [x]
        y = x
        for conv in self.convs:
            y = conv(y)
            outs.append(y)
        y = self.ese(self.concat(torch.cat(outs, dim=1)))
        return y + x if self.residual else y


class VoVNetV2(nn.Module):
    """VoVNet-V2 image classifier (see the module docstring)."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__()
        s = cfg["stem"]
        self.stem = nn.Sequential(ConvBnAct(3, s[0], 3, 2), ConvBnAct(s[0], s[1], 3, 1), ConvBnAct(s[1], s[2], 3, 2))
        stages: List[nn.Module] = []
        ch = s[2]
        for i, (mid, out, n) in enumerate(zip(cfg["conv_channels"], cfg["out_channels"], cfg["blocks"])):
            mods: List[nn.Module] = [nn.MaxPool2d(3, 2, ceil_mode=True)] if i > 0 else []
            for j in range(n):
                mods.append(OSAModule(ch, mid, out, cfg["layers"], residual=j > 0))
                ch = out
            stages.append(nn.Sequential(*mods))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(ch, cfg["num_labels"])

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(pixel_values))
        return self.fc(x.mean((2, 3)))


def build(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build VoVNet-V2 ``variant`` as an image classifier."""
    return build_cnn("vovnet_v2", VARIANTS, TASKS, VoVNetV2,
                     lambda c: f"VoVNet-V2 {variant} (OSA blocks {c['blocks']}, {c['layers']} convs each) "
                               f"-> logits [{c['num_labels']}]",
                     variant, microbatch, image_size, task, seed, overrides)
