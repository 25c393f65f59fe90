"""MobileNet v1 and v2 (tiny / base = depth multiplier 1.0 at 224): ``forward(pixel_values) -> logits``."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ._common import finish, input_generator, make_config, pick_task, random_images, require, seeded
from .spec import ModelSpec
from .vit import LogitsWrapper

TASKS = ("image_classification",)

# The published google/mobilenet_v{1,2}_1.0_224 checkpoints have 1001 classes (ImageNet + background).
VARIANTS_V1: Dict[str, Dict[str, Any]] = {
    "tiny": dict(depth_multiplier=0.25, image_size=64, num_labels=10),
    "base": dict(depth_multiplier=1.0, image_size=224, num_labels=1001),
}
VARIANTS_V2: Dict[str, Dict[str, Any]] = {
    "tiny": dict(depth_multiplier=0.35, image_size=64, num_labels=10),
    "base": dict(depth_multiplier=1.0, image_size=224, num_labels=1001),
}


def _build(version: int, variant: str, microbatch: int, image_size: Optional[int], task: Optional[str],
           seed: int, overrides: Dict[str, Any]) -> ModelSpec:
    transformers = require("transformers")
    name = f"mobilenet_v{version}"
    task = pick_task(task, TASKS, name)
    if image_size is not None:
        overrides["image_size"] = image_size
    if version == 1:
        config_cls, model_cls, table = (transformers.MobileNetV1Config,
                                        transformers.MobileNetV1ForImageClassification, VARIANTS_V1)
    else:
        config_cls, model_cls, table = (transformers.MobileNetV2Config,
                                        transformers.MobileNetV2ForImageClassification, VARIANTS_V2)
    config = make_config(config_cls, table[variant], overrides, name, transformer=False)
    with seeded(seed):
        module = LogitsWrapper(model_cls(config))
    inputs = (random_images(input_generator(seed), microbatch, config.image_size, config.num_channels),)
    desc = (f"MobileNet v{version} {variant} (depth multiplier {config.depth_multiplier}): pixel_values "
            f"[{microbatch}, 3, {config.image_size}, {config.image_size}] -> logits [{config.num_labels}]")
    return ModelSpec(name, variant, finish(module), inputs, ("pixel_values",), task, desc, config, seed,
                     microbatch)


def build_v1(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
             overrides: Dict[str, Any]) -> ModelSpec:
    """Build MobileNet v1 ``variant`` as an image classifier."""
    return _build(1, variant, microbatch, image_size, task, seed, overrides)


def build_v2(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
             overrides: Dict[str, Any]) -> ModelSpec:
    """Build MobileNet v2 ``variant`` as an image classifier."""
    return _build(2, variant, microbatch, image_size, task, seed, overrides)
