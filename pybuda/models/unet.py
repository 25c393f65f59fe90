"""U-Net for segmentation (tiny / base = the brain-MRI U-Net benchmarking ran at 256x256):
``forward(pixel_values) -> mask``.

Written from the published architecture (Ronneberger et al., "U-Net", 2015, with the batch-normalised,
padded blocks of Buda et al.'s brain-segmentation U-Net that tenstorrent/benchmarking used with
``init_features=32``, 3 input channels and 1 output channel): four encoder levels of two 3x3 conv + BN +
ReLU with 2x2 max-pooling between them (F, 2F, 4F, 8F channels), a 16F bottleneck, four decoder levels that
upsample with a 2x2/2 transposed convolution, concatenate the encoder's skip connection and run two 3x3
convs, then a 1x1 convolution and a sigmoid.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import nn

from ._cnn import ConvBnAct, build_cnn
from .spec import ModelSpec

TASKS = ("segmentation",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(features=8, levels=3, in_channels=3, out_channels=1, image_size=64),
    "base": dict(features=32, levels=4, in_channels=3, out_channels=1, image_size=256),
}


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(ConvBnAct(cin, cout, 3), ConvBnAct(cout, cout, 3))


class UNet(nn.Module):
    """U-Net (see the module docstring)."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__()
        f, levels = int(cfg["features"]), int(cfg["levels"])
        chans = [f * 2 ** k for k in range(levels)]
        self.encoders = nn.ModuleList()
        cin = int(cfg["in_channels"])
        for ch in chans:
            self.encoders.append(_block(cin, ch))
            cin = ch
        self.pool = nn.MaxPool2d(2, 2)
        self.bottleneck = _block(cin, cin * 2)
        self.ups = nn.ModuleList(nn.ConvTranspose2d(ch * 2, ch, 2, stride=2) for ch in reversed(chans))
        self.decoders = nn.ModuleList(_block(ch * 2, ch) for ch in reversed(chans))
        self.head = nn.Conv2d(chans[0], int(cfg["out_channels"]), 1)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        skips: List[torch.Tensor] = []
        x = pixel_values
        for enc in self.encoders:
            x = enc(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.ups, self.decoders, reversed(skips)):
            x = dec(torch.cat([up(x), skip], dim=1))
        return torch.sigmoid(self.head(x))


def build(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build U-Net ``variant`` for binary segmentation."""
    return build_cnn("unet", VARIANTS, TASKS, UNet,
                     lambda c: f"U-Net {variant} ({c['levels']} levels, {c['features']} features) -> mask "
                               f"[{c['out_channels']}, {c['image_size']}, {c['image_size']}]",
                     variant, microbatch, image_size, task, seed, overrides)
