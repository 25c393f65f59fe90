"""A wav2vec2-style speech encoder with a CTC head (mini config): ``forward(input_values) -> logits``.

Raw audio goes through the strided 1-D conv feature extractor (GroupNorm after the first conv), a
feature projection, a grouped convolutional position embedding and transformer layers; the CTC head
gives per-frame logits over the character vocabulary.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from pybuda.errors import ConfigError

from ._common import finish, input_generator, make_config, pick_task, require, seeded
from .spec import ModelSpec

TASKS = ("ctc",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    # Feature extractor stride 5*2*2 = 20 samples per frame; head_dim 24; 4 position-conv groups.
    "mini": dict(hidden_size=96, num_hidden_layers=2, num_attention_heads=4, intermediate_size=192,
                 conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32),
}

#: Audio samples of the example input (0.1 s at 16 kHz): 79 frames with the mini feature extractor.
DEFAULT_SEQ_LEN = 1600


class CTCLogits(nn.Module):
    """``forward(input_values [batch, samples]) -> logits [batch, frames, vocab]`` around ``Wav2Vec2ForCTC``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.model(input_values).logits


def build(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build the wav2vec2 ``variant`` as a CTC speech recogniser; ``seq_len`` is the number of audio samples."""
    transformers = require("transformers")
    task = pick_task(task, TASKS, "wav2vec2")
    samples = seq_len or DEFAULT_SEQ_LEN
    config = make_config(transformers.Wav2Vec2Config, VARIANTS[variant], overrides, "wav2vec2")
    frames = samples
    for kernel, stride in zip(config.conv_kernel, config.conv_stride):
        frames = (frames - kernel) // stride + 1
        if frames < 1:
            raise ConfigError(f"model 'wav2vec2': seq_len {samples} is too short for the feature extractor "
                              f"(kernels {list(config.conv_kernel)}, strides {list(config.conv_stride)})")
    with seeded(seed):
        module = CTCLogits(transformers.Wav2Vec2ForCTC(config))
    inputs = (torch.randn((microbatch, samples), generator=input_generator(seed)),)
    desc = (f"wav2vec2 {variant} ({config.num_hidden_layers} layers, hidden {config.hidden_size}): input_values "
            f"[{microbatch}, {samples}] -> logits [{frames}, {config.vocab_size}]")
    return ModelSpec("wav2vec2", variant, finish(module), inputs, ("input_values",), task, desc, config, seed,
                     microbatch)
