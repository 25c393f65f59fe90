"""Vision models built from transformers configs (mini variants): ``forward(pixel_values) -> logits``.

- ``swin``: a Swin-style windowed vision transformer (shifted windows are a cyclic ``roll`` plus a
  constant attention mask; relative position biases are a parameter table indexed by constants).
- ``mobilevit``: a MobileViT-style hybrid (MobileNetV2 blocks, then transformers over unfolded patches).
- ``convnext``: a ConvNeXt-style CNN (7x7 depthwise convs, channels-last LayerNorm, layer scale).

Head sizes are chosen off the 32-element tile on purpose (Swin 24, MobileViT 12/16/20).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from ._common import finish, input_generator, make_config, pick_task, random_images, require, seeded
from .spec import ModelSpec
from .vit import LogitsWrapper

TASKS = ("image_classification",)

SWIN_VARIANTS: Dict[str, Dict[str, Any]] = {
    # 64x64 images in 4x4 patches: 16x16 tokens in 4x4 windows, two stages (the second after patch merging).
    "mini": dict(image_size=64, patch_size=4, embed_dim=48, depths=[2, 2], num_heads=[2, 4], window_size=4,
                 mlp_ratio=2.0, num_labels=10),
}

MOBILEVIT_VARIANTS: Dict[str, Dict[str, Any]] = {
    # 128x128 images: MobileViT downsamples 32x, and its blocks unfold 2x2 patches, so at 64 pixels the last
    # block saw one patch and the head pooled a 2x2 map, which leaves every rounding error in the logits
    # undamped (1 % noise on the stem's output alone moved them by 7 %); at 128 the last map is 4x4.
    "mini": dict(image_size=128, hidden_sizes=[48, 64, 80], neck_hidden_sizes=[16, 24, 32, 48, 64, 80, 160],
                 num_attention_heads=4, num_labels=10),
}

CONVNEXT_VARIANTS: Dict[str, Dict[str, Any]] = {
    # Layer scale starts at 1e-6 in transformers, which with random weights would make every block an
    # identity; 1.0 keeps the blocks' arithmetic visible in the output, as trained weights do.
    "mini": dict(image_size=64, hidden_sizes=[24, 48, 96, 192], depths=[1, 1, 2, 1], layer_scale_init_value=1.0,
                 num_labels=10),
}


def normalise_batch_norms(module: torch.nn.Module, images: torch.Tensor) -> None:
    """Give a randomly initialised CNN the activation scale of a trained one, without ill-conditioning it.

    transformers initialises batch-norm scales like any weight (normal, std 0.02) and leaves the running
    statistics at mean 0 / variance 1, so random activations shrink ~50x per conv layer and the logits of
    a deep net are ~1e-5 of the input. Here every batch norm gets scale 1 and, layer by layer on
    ``images``, a running variance equal to the mean square of its input (running mean 0): activations
    keep unit RMS. Subtracting measured means instead would make each layer a difference of large nearly
    equal numbers, and the whole net hypersensitive to rounding (a 0.1 % gain error per conv moved the
    logits' cosine to 0.997), which a trained net is not.
    """
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]

    def calibrate(bn, inputs, output):
        x = inputs[0]
        reduce = [d for d in range(x.dim()) if d != 1]
        bn.running_mean.zero_()
        bn.running_var.copy_(x.pow(2).mean(dim=reduce))
        # Downstream layers must see this layer's normalised output, so recompute it with the new statistics.
        return torch.nn.functional.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0,
                                              bn.eps)

    for bn in norms:
        torch.nn.init.ones_(bn.weight)
    hooks = [bn.register_forward_hook(calibrate) for bn in norms]
    module.eval()
    try:
        with torch.no_grad():
            module(images)
    finally:
        for hook in hooks:
            hook.remove()


def _build(name: str, config_cls: str, model_cls: str, variants: Dict[str, Dict[str, Any]], variant: str,
           microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
           overrides: Dict[str, Any], transformer: bool, calibrate: bool = False) -> ModelSpec:
    transformers = require("transformers")
    task = pick_task(task, TASKS, name)
    if image_size is not None:
        overrides["image_size"] = image_size
    config = make_config(getattr(transformers, config_cls), variants[variant], overrides, name,
                         transformer=transformer)
    channels = getattr(config, "num_channels", 3)
    with seeded(seed):
        model = getattr(transformers, model_cls)(config)
        if calibrate:
            # Statistics from images that are not the example inputs, so the example is not special.
            normalise_batch_norms(model, torch.randn(8, channels, config.image_size, config.image_size))
        module = LogitsWrapper(model)
    inputs = (random_images(input_generator(seed), microbatch, config.image_size, channels),)
    desc = (f"{name} {variant} ({config_cls[:-6]}): pixel_values [{microbatch}, {channels}, {config.image_size}, "
            f"{config.image_size}] -> logits [{config.num_labels}]")
    return ModelSpec(name, variant, finish(module), inputs, ("pixel_values",), task, desc, config, seed,
                     microbatch)


def build_swin(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
               overrides: Dict[str, Any]) -> ModelSpec:
    """Build a Swin-style windowed vision transformer ``variant`` as an image classifier."""
    return _build("swin", "SwinConfig", "SwinForImageClassification", SWIN_VARIANTS, variant, microbatch,
                  image_size, task, seed, overrides, transformer=True)


def build_mobilevit(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
                    overrides: Dict[str, Any]) -> ModelSpec:
    """Build a MobileViT-style hybrid CNN/transformer ``variant`` as an image classifier."""
    return _build("mobilevit", "MobileViTConfig", "MobileViTForImageClassification", MOBILEVIT_VARIANTS, variant,
                  microbatch, image_size, task, seed, overrides, transformer=True, calibrate=True)


def build_convnext(variant: str, microbatch: int, image_size: Optional[int], task: Optional[str], seed: int,
                   overrides: Dict[str, Any]) -> ModelSpec:
    """Build a ConvNeXt-style CNN ``variant`` as an image classifier."""
    return _build("convnext", "ConvNextConfig", "ConvNextForImageClassification", CONVNEXT_VARIANTS, variant,
                  microbatch, image_size, task, seed, overrides, transformer=False)
