"""ViT (tiny / base patch16-224) image classifier: ``forward(pixel_values) -> logits``."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from ._common import finish, input_generator, make_config, pick_task, random_images, require, seeded
from .spec import ModelSpec

TASKS = ("image_classification",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    # 64x64 images in 16x16 patches: 16 patches + CLS = 17 tokens, deliberately not a multiple of 32.
    "tiny": dict(image_size=64, patch_size=16, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=512, num_labels=10),
    # google/vit-base-patch16-224
    "base": dict(image_size=224, patch_size=16, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, num_labels=1000),
}


class LogitsWrapper(nn.Module):
    """``forward(pixel_values) -> logits``: strips the ``ModelOutput`` of a transformers image classifier."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values).logits


class ViTClassifierWrapper(nn.Module):
    """``forward(pixel_values) -> logits`` around a ``ViTForImageClassification``.

    Runs embeddings, layers, final norm and the CLS-token classifier explicitly: ``ViTModel.forward``
    asks transformers for an (all-zero) attention mask, which under ``torch.export`` materialises as
    arange/compare/where ops that mean nothing for an unmasked vision model.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        vit = self.model.vit
        hidden = vit.embeddings(pixel_values)
        # transformers 5 keeps the blocks in ``vit.layers``; 4.x in ``vit.encoder.layer``.
        layers = vit.layers if hasattr(vit, "layers") else vit.encoder.layer
        for layer in layers:
            hidden = layer(hidden, None)
            if isinstance(hidden, tuple):  # transformers 4.x layers return tuples
                hidden = hidden[0]
        hidden = vit.layernorm(hidden)
        return self.model.classifier(hidden[:, 0, :])


def build(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build ViT ``variant`` as an image classifier."""
    transformers = require("transformers")
    task = pick_task(task, TASKS, "vit")
    if image_size is not None:
        overrides["image_size"] = image_size
    config = make_config(transformers.ViTConfig, VARIANTS[variant], overrides, "vit")
    with seeded(seed):
        module = ViTClassifierWrapper(transformers.ViTForImageClassification(config))
    inputs = (random_images(input_generator(seed), microbatch, config.image_size, config.num_channels),)
    desc = (f"ViT-{variant} patch{config.patch_size} ({config.num_hidden_layers} layers, hidden "
            f"{config.hidden_size}): pixel_values [{microbatch}, 3, {config.image_size}, {config.image_size}] "
            f"-> logits [{config.num_labels}]")
    return ModelSpec("vit", variant, finish(module), inputs, ("pixel_values",), task, desc, config, seed,
                     microbatch)
