"""Decoder-only LLMs in the style of Llama, OPT and GPT-NeoX (mini configs): ``forward(input_ids) -> logits``.

Unlike :mod:`pybuda.models.gpt2`, these wrappers hand transformers nothing precomputed: the causal mask,
the position ids and (for Llama) the rotary tables come from the model's own code, so a capture exercises
what a user's decoder does on the device: boolean causal masks, SDPA, rotary embeddings, RMSNorm,
SwiGLU and grouped-query attention (Llama), learned offset positions and ReLU MLPs (OPT), rotary
embeddings on part of each head and parallel attention/MLP residuals (GPT-NeoX). The key/value
cache is switched off (``use_cache=False``): the zoo model returns the logits only. (Captured with the
default ``use_cache=True``, a decoder's cache becomes extra graph outputs; see
:func:`pybuda.frontend.fx_export.register_cache_pytrees`.)
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import nn

from pybuda.errors import ConfigError

from ._common import finish, input_generator, make_config, pick_task, random_token_ids, require, seeded
from .spec import ModelSpec

TASKS = ("causal_lm",)

LLAMA_VARIANTS: Dict[str, Dict[str, Any]] = {
    # head_dim 24 (not a tile multiple) and 4 query heads sharing 2 key/value heads (GQA).
    "mini": dict(vocab_size=512, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                 attn_implementation="sdpa"),
}

OPT_VARIANTS: Dict[str, Dict[str, Any]] = {
    # head_dim 20; OPT's learned positions are offset by 2, hence the table of max_position_embeddings + 2.
    "mini": dict(vocab_size=512, hidden_size=80, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=256, word_embed_proj_dim=80, attn_implementation="sdpa"),
}

GPT_NEOX_VARIANTS: Dict[str, Dict[str, Any]] = {
    # head_dim 24 with rotary on a quarter of it (6 dims: the rotated half is 3, off every tile boundary);
    # attention and MLP read the same input and add to one residual (use_parallel_residual).
    "mini": dict(vocab_size=512, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, rotary_pct=0.25, use_parallel_residual=True, max_position_embeddings=256,
                 attn_implementation="sdpa"),
}

DEFAULT_SEQ_LEN = 32


class CausalLMLogits(nn.Module):
    """``forward(input_ids) -> logits [batch, seq, vocab]`` around a transformers ``*ForCausalLM``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def _build(name: str, config_cls: str, model_cls: str, variants: Dict[str, Dict[str, Any]], variant: str,
           microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
           overrides: Dict[str, Any]) -> ModelSpec:
    transformers = require("transformers")
    task = pick_task(task, TASKS, name)
    seq_len = seq_len or DEFAULT_SEQ_LEN
    config = make_config(getattr(transformers, config_cls), variants[variant], overrides, name)
    if seq_len > config.max_position_embeddings:
        raise ConfigError(f"model '{name}': seq_len {seq_len} exceeds max_position_embeddings "
                          f"{config.max_position_embeddings}")
    with seeded(seed):
        module = CausalLMLogits(getattr(transformers, model_cls)(config))
    inputs = (random_token_ids(input_generator(seed), microbatch, seq_len, config.vocab_size),)
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    desc = (f"{name} {variant} ({config.num_hidden_layers} layers, hidden {config.hidden_size}, {heads} heads "
            f"of {config.hidden_size // heads}, {kv} key/value heads, vocab {config.vocab_size}): "
            f"input_ids [{microbatch}, {seq_len}] -> logits")
    return ModelSpec(name, variant, finish(module), inputs, ("input_ids",), task, desc, config, seed, microbatch)


def build_llama(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
                overrides: Dict[str, Any]) -> ModelSpec:
    """Build a Llama-style decoder ``variant`` (RMSNorm, rotary, SwiGLU, GQA) as a causal LM."""
    return _build("llama", "LlamaConfig", "LlamaForCausalLM", LLAMA_VARIANTS, variant, microbatch, seq_len,
                  task, seed, overrides)


def build_opt(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
              overrides: Dict[str, Any]) -> ModelSpec:
    """Build an OPT-style decoder ``variant`` (learned positions, pre-LayerNorm, ReLU MLP) as a causal LM."""
    return _build("opt", "OPTConfig", "OPTForCausalLM", OPT_VARIANTS, variant, microbatch, seq_len, task, seed,
                  overrides)


def build_gpt_neox(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
                   overrides: Dict[str, Any]) -> ModelSpec:
    """Build a GPT-NeoX-style decoder ``variant`` (partial rotary, parallel residual, GELU MLP) as a causal LM."""
    return _build("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", GPT_NEOX_VARIANTS, variant, microbatch,
                  seq_len, task, seed, overrides)
