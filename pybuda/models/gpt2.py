"""GPT-2 (tiny / small) language model: ``forward(input_ids) -> logits`` without a KV cache."""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from pybuda.errors import ConfigError, InputError

from ._common import finish, input_generator, make_config, pick_task, random_token_ids, require, seeded
from .spec import ModelSpec

TASKS = ("causal_lm",)

VARIANTS: Dict[str, Dict[str, Any]] = {
    # A small vocabulary keeps the LM head (the largest matmul) cheap to compile and simulate.
    "tiny": dict(n_layer=2, n_embd=128, n_head=2, vocab_size=1024, n_positions=256, bos_token_id=1023,
                 eos_token_id=1023),
    "small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
}

DEFAULT_SEQ_LEN = 128


class GPT2LMWrapper(nn.Module):
    """``forward(input_ids) -> logits [batch, seq, vocab]`` around a ``GPT2LMHeadModel``.

    The additive causal mask and position ids are precomputed buffers for ``seq_len`` tokens, handed to
    transformers ready-made, so the captured graph holds constants instead of transformers' mask factory.
    """

    def __init__(self, model: nn.Module, seq_len: int):
        super().__init__()
        self.model = model
        causal = torch.ones((seq_len, seq_len), dtype=torch.bool).tril()
        mask = torch.zeros((1, 1, seq_len, seq_len)).masked_fill(~causal, torch.finfo(torch.float32).min)
        self.register_buffer("causal_mask", mask, persistent=False)
        self.register_buffer("position_ids", torch.arange(seq_len).unsqueeze(0), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[-1]
        limit = self.position_ids.shape[-1]
        if seq > limit:
            raise InputError(f"GPT-2 wrapper was built for at most {limit} tokens, got {seq}")
        mask, pos = self.causal_mask, self.position_ids
        if seq != limit:  # slice only when needed, so the common case adds no ops to the graph
            mask, pos = mask[:, :, :seq, :seq], pos[:, :seq]
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=False).logits


def build(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build GPT-2 ``variant`` as a causal LM returning logits."""
    transformers = require("transformers")
    task = pick_task(task, TASKS, "gpt2")
    seq_len = seq_len or DEFAULT_SEQ_LEN
    overrides.setdefault("use_cache", False)
    config = make_config(transformers.GPT2Config, VARIANTS[variant], overrides, "gpt2")
    if seq_len > config.n_positions:
        raise ConfigError(f"model 'gpt2': seq_len {seq_len} exceeds n_positions {config.n_positions}")
    with seeded(seed):
        module = GPT2LMWrapper(transformers.GPT2LMHeadModel(config), seq_len)
    inputs = (random_token_ids(input_generator(seed), microbatch, seq_len, config.vocab_size),)
    desc = (f"GPT-2 {variant} ({config.n_layer} layers, hidden {config.n_embd}, vocab {config.vocab_size}): "
            f"input_ids [{microbatch}, {seq_len}] -> logits")
    return ModelSpec("gpt2", variant, finish(module), inputs, ("input_ids",), task, desc, config, seed, microbatch)
