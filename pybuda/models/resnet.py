"""ResNet (tiny / ResNet-50) image classifier: ``forward(pixel_values) -> logits``."""

from __future__ import annotations

from typing import Any, Dict, Optional

from ._common import finish, input_generator, make_config, pick_task, random_images, require, seeded
from .spec import ModelSpec
from .vit import LogitsWrapper

TASKS = ("image_classification",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    # Bottleneck blocks like ResNet-50, one per stage, 4x narrower.
    "tiny": dict(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                 layer_type="bottleneck", num_labels=10),
    # microsoft/resnet-50
    "resnet50": dict(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
                     layer_type="bottleneck", num_labels=1000),
    # The original ResNet-50 (He et al. 2015, "v1", as in Keras' ``ResNet50``): each stage downsamples in its
    # first 1x1 convolution, not in the 3x3 (torchvision's and microsoft/resnet-50's "v1.5").
    "resnet50_v1": dict(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
                        layer_type="bottleneck", num_labels=1000, downsample_in_bottleneck=True),
}

DEFAULT_IMAGE_SIZE = {"tiny": 64, "resnet50": 224, "resnet50_v1": 224}


def build(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build ResNet ``variant`` as an image classifier."""
    transformers = require("transformers")
    task = pick_task(task, TASKS, "resnet")
    image_size = image_size or DEFAULT_IMAGE_SIZE[variant]
    config = make_config(transformers.ResNetConfig, VARIANTS[variant], overrides, "resnet", transformer=False)
    with seeded(seed):
        module = LogitsWrapper(transformers.ResNetForImageClassification(config))
    inputs = (random_images(input_generator(seed), microbatch, image_size, config.num_channels),)
    desc = (f"ResNet {variant} (depths {list(config.depths)}, {config.layer_type}): pixel_values "
            f"[{microbatch}, 3, {image_size}, {image_size}] -> logits [{config.num_labels}]")
    return ModelSpec("resnet", variant, finish(module), inputs, ("pixel_values",), task, desc, config, seed,
                     microbatch)
