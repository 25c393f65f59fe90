"""Building blocks and the builder shared by the zoo's plain-PyTorch CNNs (VoVNet, Inception, HRNet, U-Net).

These models are written from their published architectures (no transformers classes exist for them), so
their configuration is a plain dict of the variant's fields; :func:`build_cnn` validates overrides against
it the way :func:`pybuda.models._common.make_config` does for transformers configs.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from torch import nn

from pybuda.errors import ConfigError

from ._common import finish, input_generator, pick_task, random_images, seeded
from .spec import ModelSpec


class ConvBnAct(nn.Sequential):
    """``conv (no bias) -> BatchNorm -> ReLU`` (the activation is optional), the unit of every CNN here.

    ``kernel`` and ``padding`` take an int or an (h, w) pair, for Inception's 1x7/7x1 factorised kernels.
    """

    def __init__(self, cin: int, cout: int, kernel: Any = 3, stride: int = 1, padding: Any = None,
                 act: bool = True, eps: float = 1e-5):
        if padding is None:
            padding = tuple(k // 2 for k in kernel) if isinstance(kernel, tuple) else kernel // 2
        layers = [nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False),
                  nn.BatchNorm2d(cout, eps=eps)]
        if act:
            layers.append(nn.ReLU(inplace=False))
        super().__init__(*layers)


def scaled(channels: int, width: float, minimum: int = 4) -> int:
    """``channels`` times a width multiplier, rounded to a multiple of 4 (at least ``minimum``)."""
    return max(minimum, int(round(channels * width / 4.0)) * 4)


def build_cnn(name: str, variants: Mapping[str, Dict[str, Any]], tasks: Tuple[str, ...],
              make: Callable[[Dict[str, Any]], nn.Module], describe: Callable[[Dict[str, Any]], str],
              variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
              overrides: Dict[str, Any]) -> ModelSpec:
    """Build ``make(config)`` with seeded random weights, in eval mode, and random example images.

    ``config`` is the variant's dict updated with ``overrides`` (unknown keys raise :class:`ConfigError`,
    naming the valid ones) and ``image_size`` when given.
    """
    task = pick_task(task, tasks, name)
    config = dict(variants[variant])
    unknown = sorted(k for k in overrides if k not in config)
    if unknown:
        raise ConfigError(f"model '{name}': unknown option(s) {unknown}; options are {sorted(config)}")
    config.update(overrides)
    if image_size is not None:
        config["image_size"] = int(image_size)
    with seeded(seed):
        module = make(config)
    size = int(config["image_size"])
    inputs = (random_images(input_generator(seed), microbatch, size, int(config.get("in_channels", 3))),)
    desc = f"{describe(config)}: pixel_values [{microbatch}, {config.get('in_channels', 3)}, {size}, {size}]"
    return ModelSpec(name, variant, finish(module), inputs, ("pixel_values",), task, desc, config, seed,
                     microbatch)
