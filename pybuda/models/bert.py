"""BERT (tiny / base / large): the encoder alone, as in the TT-Buda BERT example, or a sequence classifier."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import torch
from torch import nn

from pybuda.errors import ConfigError

from ._common import (finish, input_generator, make_config, pick_task, random_token_ids, require, seeded)
from .spec import ModelSpec

TASKS = ("encoder", "text_classification")

#: Config fields per variant (everything else is BertConfig's default: vocab 30522, 512 positions, GELU).
VARIANTS: Dict[str, Dict[str, Any]] = {
    # google/bert_uncased_L-2_H-128_A-2 ("bert-tiny")
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "large": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
}

DEFAULT_SEQ_LEN = {"tiny": 128, "base": 128, "large": 384}


def extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Turn a ``[batch, seq]`` 1/0 padding mask into BERT's additive ``[batch, 1, 1, seq]`` mask.

    Kept tokens get 0, padded ones the most negative finite value, so softmax gives them zero weight.
    Computing it here (instead of inside transformers' mask utilities) keeps the captured graph to a
    handful of elementwise ops.
    """
    mask = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - mask) * torch.finfo(dtype).min


class BertEncoderWrapper(nn.Module):
    """``forward(hidden_states[, attention_mask]) -> last hidden state`` around a ``BertEncoder``.

    ``attention_mask``, when given, is the additive extended mask of :func:`extended_attention_mask`.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.encoder(hidden_states, attention_mask=attention_mask).last_hidden_state


class BertClassifierWrapper(nn.Module):
    """``forward(input_ids[, attention_mask]) -> logits`` around a ``BertForSequenceClassification``.

    Runs embeddings, encoder, pooler and classifier explicitly so the padding mask becomes a clean
    additive tensor rather than transformers' mask-factory graph (gathers, ``where``, boolean ands).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        bert = self.model.bert
        hidden = bert.embeddings(input_ids=input_ids)
        mask = None if attention_mask is None else extended_attention_mask(attention_mask, hidden.dtype)
        hidden = bert.encoder(hidden, attention_mask=mask).last_hidden_state
        return self.model.classifier(self.model.dropout(bert.pooler(hidden)))


def bert_config(variant: str, overrides: Mapping[str, Any] = ()):
    """The ``BertConfig`` of a variant (eager attention, no dropout), with field ``overrides``."""
    transformers = require("transformers")
    return make_config(transformers.BertConfig, VARIANTS[variant], dict(overrides), "bert")


def build(variant: str, microbatch: int, seq_len: Optional[int], task: Optional[str], seed: int,
          overrides: Dict[str, Any]) -> ModelSpec:
    """Build BERT ``variant`` for ``task`` ("encoder" or "text_classification")."""
    transformers = require("transformers")
    task = pick_task(task, TASKS, "bert")
    seq_len = seq_len or DEFAULT_SEQ_LEN[variant]
    if task == "text_classification":
        overrides.setdefault("num_labels", 2)
    config = bert_config(variant, overrides)
    if task == "text_classification" and seq_len > config.max_position_embeddings:
        raise ConfigError(f"model 'bert': seq_len {seq_len} exceeds max_position_embeddings "
                          f"{config.max_position_embeddings}")
    gen = input_generator(seed)
    with seeded(seed):
        if task == "encoder":
            # Only the encoder is built: the embeddings of BertModel are never used by this task.
            module = BertEncoderWrapper(transformers.models.bert.modeling_bert.BertEncoder(config))
            _init_like_pretrained(module, config)
        else:
            module = BertClassifierWrapper(transformers.BertForSequenceClassification(config))
    if task == "encoder":
        inputs = (torch.randn((microbatch, seq_len, config.hidden_size), generator=gen),)
        names = ("hidden_states",)
        desc = (f"BERT-{variant} encoder ({config.num_hidden_layers} layers, hidden {config.hidden_size}): "
                f"hidden states [{microbatch}, {seq_len}, {config.hidden_size}] -> last hidden state")
    else:
        inputs = (random_token_ids(gen, microbatch, seq_len, config.vocab_size),
                  torch.ones((microbatch, seq_len), dtype=torch.long))
        names = ("input_ids", "attention_mask")
        desc = (f"BERT-{variant} sequence classifier ({config.num_labels} labels): input_ids + attention_mask "
                f"[{microbatch}, {seq_len}] -> logits")
    return ModelSpec("bert", variant, finish(module), inputs, names, task, desc, config, seed, microbatch)


def _init_like_pretrained(module: nn.Module, config) -> None:
    """Initialise a bare ``BertEncoder`` the way ``BertPreTrainedModel`` would (N(0, 0.02), LayerNorm 1/0).

    A bare encoder is a plain ``nn.Module``, so transformers never runs its init on it; PyTorch's default
    Kaiming init would give activations of a different scale than any real BERT.
    """
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            nn.init.normal_(sub.weight, mean=0.0, std=config.initializer_range)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)
        elif isinstance(sub, nn.LayerNorm):
            nn.init.ones_(sub.weight)
            nn.init.zeros_(sub.bias)
