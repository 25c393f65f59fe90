"""Whisper audio encoder (mini / tiny / base): ``forward(input_features) -> last hidden state``."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from pybuda.errors import ConfigError

from ._common import finish, input_generator, make_config, pick_task, require, seeded
from .spec import ModelSpec

TASKS = ("audio_encoder",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    # 200 mel frames -> 100 positions: a quick stand-in with the same layer structure.
    "mini": dict(d_model=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=512,
                 num_mel_bins=80, max_source_positions=100),
    # openai/whisper-tiny: 30 s of audio = 3000 frames -> 1500 positions.
    "tiny": dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                 num_mel_bins=80, max_source_positions=1500),
    # openai/whisper-base
    "base": dict(d_model=512, encoder_layers=6, encoder_attention_heads=8, encoder_ffn_dim=2048,
                 num_mel_bins=80, max_source_positions=1500),
}


class WhisperEncoderWrapper(nn.Module):
    """``forward(input_features [batch, mel, frames]) -> last hidden state [batch, frames/2, d_model]``."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_features).last_hidden_state


def build(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build the Whisper encoder of ``variant``; ``seq_len`` is the number of mel frames (even)."""
    transformers = require("transformers")
    task = pick_task(task, TASKS, "whisper")
    if seq_len is not None:
        # The encoder only accepts exactly 2 * max_source_positions frames (two convs, the second strided).
        if seq_len % 2:
            raise ConfigError(f"model 'whisper': seq_len (mel frames) must be even, got {seq_len}")
        overrides["max_source_positions"] = seq_len // 2
    config = make_config(transformers.WhisperConfig, VARIANTS[variant], overrides, "whisper")
    frames = 2 * config.max_source_positions
    with seeded(seed):
        # The encoder alone: building WhisperModel would also build (and initialise) the decoder.
        encoder = transformers.models.whisper.modeling_whisper.WhisperEncoder(config)
        module = WhisperEncoderWrapper(encoder)
    inputs = (torch.randn((microbatch, config.num_mel_bins, frames), generator=input_generator(seed)),)
    desc = (f"Whisper-{variant} encoder ({config.encoder_layers} layers, d_model {config.d_model}): "
            f"input_features [{microbatch}, {config.num_mel_bins}, {frames}] -> last hidden state "
            f"[{config.max_source_positions}, {config.d_model}]")
    return ModelSpec("whisper", variant, finish(module), inputs, ("input_features",), task, desc, config, seed,
                     microbatch)
