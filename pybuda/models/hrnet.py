"""HRNetV2 image classifier (tiny / W64 = ``hrnetv2_w64``): ``forward(pixel_values) -> logits``.

Written from the published architecture (Wang et al., "Deep High-Resolution Representation Learning for
Visual Recognition", TPAMI 2020; the ImageNet classification network of its appendix): a stride-4 stem of
two 3x3/2 convolutions, stage 1 of four bottleneck blocks (64 -> 256 channels), then stages 2-4 with
2, 3 and 4 parallel branches of widths ``W, 2W, 4W, 8W`` at 1/4, 1/8, 1/16 and 1/32 resolution. Each
stage repeats ``modules[i]`` high-resolution modules; a module runs ``blocks`` basic residual blocks on
every branch and then fuses all branches into each (1x1 conv + nearest upsampling from lower resolutions,
chains of 3x3/2 convs from higher ones, summed, ReLU). A new branch is made by a 3x3/2 conv of the lowest
one. The classification head turns each branch into 128/256/512/1024 channels with a bottleneck block,
merges them from high to low resolution through 3x3/2 convs, projects to 2048 channels with a 1x1 conv,
averages globally and classifies. benchmarking ran ``hrnet -c v2_w64`` at 224x224.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import nn

from ._cnn import ConvBnAct, build_cnn
from .spec import ModelSpec

TASKS = ("image_classification",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    "tiny": dict(width=8, modules=[1, 1, 1], blocks=1, stem=16, head=[8, 16, 32, 64], head_out=128, image_size=64,
                 num_labels=10),
    "w64": dict(width=64, modules=[1, 4, 3], blocks=4, stem=64, head=[32, 64, 128, 256], head_out=2048,
                image_size=224, num_labels=1000),
}


class BasicBlock(nn.Module):
    """Two 3x3 convs with an identity shortcut (``cin == cout``)."""

    def __init__(self, ch: int):
        super().__init__()
        self.body = nn.Sequential(ConvBnAct(ch, ch, 3), ConvBnAct(ch, ch, 3, act=False))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + x)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 (x4 expansion) with a projected shortcut when the channels change."""

    def __init__(self, cin: int, mid: int):
        super().__init__()
        cout = mid * 4
        self.body = nn.Sequential(ConvBnAct(cin, mid, 1), ConvBnAct(mid, mid, 3), ConvBnAct(mid, cout, 1, act=False))
        self.short = ConvBnAct(cin, cout, 1, act=False) if cin != cout else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.short(x))


class HRModule(nn.Module):
    """Parallel branches of basic blocks, then every branch fused into every other."""

    def __init__(self, widths: List[int], blocks: int):
        super().__init__()
        self.branches = nn.ModuleList(nn.Sequential(*[BasicBlock(w) for _ in range(blocks)]) for w in widths)
        fuse = []
        for i, wi in enumerate(widths):
            row = []
            for j, wj in enumerate(widths):
                if j == i:
                    row.append(nn.Identity())
                elif j > i:  # lower resolution: project, then upsample
                    row.append(nn.Sequential(ConvBnAct(wj, wi, 1, act=False),
                                             nn.Upsample(scale_factor=2 ** (j - i), mode="nearest")))
                else:  # higher resolution: i - j strided convs, the last one to the target width
                    steps = [ConvBnAct(wj, wj, 3, 2) for _ in range(i - j - 1)]
                    steps.append(ConvBnAct(wj, wi, 3, 2, act=False))
                    row.append(nn.Sequential(*steps))
            fuse.append(nn.ModuleList(row))
        self.fuse = nn.ModuleList(fuse)
        self.relu = nn.ReLU()

    def forward(self, xs: List[torch.Tensor]) -> List[torch.Tensor]:
        ys = [branch(x) for branch, x in zip(self.branches, xs)]
        out = []
        for row in self.fuse:
            acc = row[0](ys[0])
            for f, y in zip(row[1:], ys[1:]):
                acc = acc + f(y)
            out.append(self.relu(acc))
        return out


class HRNetV2(nn.Module):
    """HRNetV2 image classifier (see the module docstring)."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__()
        w, stem = int(cfg["width"]), int(cfg["stem"])
        self.stem = nn.Sequential(ConvBnAct(3, stem, 3, 2), ConvBnAct(stem, stem, 3, 2))
        layer1: List[nn.Module] = []
        ch = stem
        for _ in range(4):
            layer1.append(Bottleneck(ch, stem))
            ch = stem * 4
        self.layer1 = nn.Sequential(*layer1)
        widths = [w]
        self.transitions = nn.ModuleList()
        self.stages = nn.ModuleList()
        prev = [ch]
        for stage, n_modules in enumerate(cfg["modules"]):
            widths = [w * 2 ** k for k in range(stage + 2)]
            trans = []
            for k, wk in enumerate(widths):
                if k < len(prev):
                    trans.append(nn.Identity() if prev[k] == wk else ConvBnAct(prev[k], wk, 3))
                else:  # a new, lower-resolution branch from the lowest existing one
                    trans.append(ConvBnAct(prev[-1], wk, 3, 2))
            self.transitions.append(nn.ModuleList(trans))
            self.stages.append(nn.Sequential(*[HRModule(widths, int(cfg["blocks"])) for _ in range(n_modules)]))
            prev = widths
        head = [int(h) for h in cfg["head"]]
        self.incre = nn.ModuleList(Bottleneck(wk, hk) for wk, hk in zip(widths, head))
        self.down = nn.ModuleList(ConvBnAct(head[k] * 4, head[k + 1] * 4, 3, 2) for k in range(len(head) - 1))
        self.final = ConvBnAct(head[-1] * 4, int(cfg["head_out"]), 1)
        self.fc = nn.Linear(int(cfg["head_out"]), cfg["num_labels"])

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        xs = [self.layer1(self.stem(pixel_values))]
        for trans, stage in zip(self.transitions, self.stages):
            xs = [t(xs[min(k, len(xs) - 1)]) for k, t in enumerate(trans)]
            for module in stage:
                xs = module(xs)
        y = self.incre[0](xs[0])
        for k, down in enumerate(self.down):
            y = self.incre[k + 1](xs[k + 1]) + down(y)
        return self.fc(self.final(y).mean((2, 3)))


def build(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build HRNetV2 ``variant`` as an image classifier."""
    return build_cnn("hrnet", VARIANTS, TASKS, HRNetV2,
                     lambda c: f"HRNetV2-W{c['width']} (modules {c['modules']}, {c['blocks']} blocks per branch) "
                               f"-> logits [{c['num_labels']}]",
                     variant, microbatch, image_size, task, seed, overrides)
